//! `retry_after`: a retry earlier than the Retry-After it was given.
//!
//! Why: a 429 or 503 with Retry-After is the server saying when it can take the request again.
//! A client that comes back sooner is refused again at best and, multiplied by every client, keeps
//! an overloaded service down. Honouring Retry-After is the cheapest back-pressure there is.
//!
//! Where the Retry-After comes from: the value the response carried, as the journal recorded it
//! (the fault server records every response's Retry-After, seconds or an HTTP-date; a journal
//! may also carry a field `retry_after_s`, read through
//! [`JournalRecord`](super::journal::JournalRecord)). For a journal without it, the value is
//! taken from `by_rule` (the id of the schedule rule that fired), from `by_status`, and from
//! `default_s` for responses whose status is in `statuses` — a configuration that must match the
//! fault schedule that produced the journal (and be scaled with it under `--time-scale`).
//!
//! The delay is measured at the server (next arrival minus the previous response's end), so it
//! over-states the client's wait by the time the client took to handle the response;
//! `tolerance_ms` absorbs rounding. That handling is also why a short Retry-After tells nothing
//! when it is met: a client that ignores it and retries at once comes back after handling the
//! response — tens of milliseconds on an event loop — and so meets a Retry-After of up to
//! `immediate_ms` + `tolerance_ms` as well as a client that waited. Such retries still fail when
//! they came back early (that is early whatever the handling), but are no evidence of honouring:
//! with no other, the verdict is inconclusive and says why.
//!
//! Metrics: `retries_checked`, `too_early`, `smallest_margin_ms` (delay minus Retry-After),
//! `on_time_after_short_retry_after` (retries that met a Retry-After too short to tell).

use history::Facts;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::operations::Previous;
use super::spec::{non_negative, About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `retry_after` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetryAfterConfig {
    /// Retry-After (seconds) sent with every response whose status is in `statuses`.
    pub default_s: Option<f64>,
    /// Statuses `default_s` applies to.
    pub statuses: Vec<u16>,
    /// Retry-After (seconds) by response status.
    pub by_status: BTreeMap<u16, f64>,
    /// Retry-After (seconds) by the id of the schedule rule that produced the response.
    pub by_rule: BTreeMap<String, f64>,
    /// How much earlier than Retry-After a retry may arrive (ms).
    pub tolerance_ms: u64,
    /// How long (ms) a client that retries at once may take to come back, handling the
    /// response: a Retry-After of at most this plus `tolerance_ms` is met by such a client too,
    /// so a retry that met it is no evidence of honouring it. Real time, not scaled.
    pub immediate_ms: f64,
    /// Factor applied to the Retry-After recorded in the journal: a scenario's time scale (its
    /// clients wait the server's Retry-After scaled, as every other duration); 1 otherwise.
    pub recorded_scale: f64,
}

impl Default for RetryAfterConfig {
    fn default() -> Self {
        RetryAfterConfig {
            default_s: None,
            statuses: vec![429, 503],
            by_status: BTreeMap::new(),
            by_rule: BTreeMap::new(),
            tolerance_ms: 50,
            // A fleet of 50 on one event loop that retries at once is back 10–55 ms after its
            // failures (calibration/RESULTS.md): the pace of handling responses.
            immediate_ms: 50.0,
            recorded_scale: 1.0,
        }
    }
}

impl RetryAfterConfig {
    /// The Retry-After (seconds) the response of `prev` carried, as far as we know.
    fn retry_after_s(&self, prev: &Previous) -> Option<f64> {
        prev.retry_after_s
            .map(|s| s * self.recorded_scale)
            .or_else(|| {
                prev.rule
                    .as_ref()
                    .and_then(|r| self.by_rule.get(r).copied())
            })
            .or_else(|| prev.status.and_then(|s| self.by_status.get(&s).copied()))
            .or_else(|| {
                self.default_s
                    .filter(|_| prev.status.is_some_and(|s| self.statuses.contains(&s)))
            })
    }
}

/// The `retry_after` check.
pub(crate) struct RetryAfterCheck {
    cfg: RetryAfterConfig,
    findings: Findings,
    /// Retries judged: early ones, and on-time ones after a Retry-After long enough to tell.
    checked: u64,
    /// Retries that met a Retry-After too short to tell honouring from ignoring.
    short_met: u64,
    /// The longest such Retry-After (s).
    short_max_s: f64,
    smallest_margin_ms: Option<f64>,
}

impl RetryAfterCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &RetryAfterConfig, ctx: Context) -> Self {
        RetryAfterCheck {
            cfg: cfg.clone(),
            findings: Findings::new(ctx.max_evidence),
            checked: 0,
            short_met: 0,
            short_max_s: 0.0,
            smallest_margin_ms: None,
        }
    }
}

impl Check for RetryAfterCheck {
    fn name(&self) -> &'static str {
        "retry_after"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let (Some(prev), Some(delay_us)) = (a.previous(), a.delay_us()) else {
            return;
        };
        let Some(ra_s) = self.cfg.retry_after_s(prev) else {
            return;
        };
        // Sent before the previous answer was, or by another client: a concurrent request of
        // the same key (a burst), not a retry of a response this client had seen.
        let other_client = matches!(
            (&a.entry.client_id, &prev.client_id),
            (Some(a), Some(b)) if a != b
        );
        if a.entry.t_recv_us < prev.t_done_us || other_client {
            return;
        }
        let delay_ms = delay_us as f64 / 1000.0;
        let margin = delay_ms - ra_s * 1000.0;
        let early = margin < -(self.cfg.tolerance_ms as f64);
        // Early is early whatever the client's handling; on time after a Retry-After no longer
        // than a client that retries at once takes to come back is no evidence of waiting.
        let telling = ra_s * 1000.0 > self.cfg.immediate_ms + self.cfg.tolerance_ms as f64;
        if !early && !telling {
            self.short_met += 1;
            self.short_max_s = self.short_max_s.max(ra_s);
            return;
        }
        self.checked += 1;
        self.smallest_margin_ms = Some(self.smallest_margin_ms.map_or(margin, |m| m.min(margin)));
        if early {
            self.findings.push(
                format!(
                    "{} retried {delay_ms:.0} ms after a {} that said Retry-After {ra_s} s",
                    a.step.key,
                    prev.status
                        .map_or("response".to_string(), |s| s.to_string())
                ),
                Some(a.step.key.to_string()),
                vec![prev.seq, a.entry.seq],
            );
        }
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let configured = self.cfg.default_s.is_some()
            || !self.cfg.by_status.is_empty()
            || !self.cfg.by_rule.is_empty();
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} of {} retries came before their Retry-After; first: {first}",
                    self.findings.total(),
                    self.checked
                ),
            )
        } else if self.checked == 0 && self.short_met > 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "cannot tell: the {} retries followed a Retry-After of at most {:.0} ms, \
                     which a client that retries at once also meets (it comes back within \
                     immediate_ms {} + tolerance_ms {} of handling the response): honouring it \
                     and ignoring it look the same",
                    self.short_met,
                    self.short_max_s * 1000.0,
                    self.cfg.immediate_ms,
                    self.cfg.tolerance_ms
                ),
            )
        } else if self.checked == 0 && !configured {
            (
                Verdict::Inconclusive,
                "not enough data: no response in the journal carried a Retry-After (none was \
                 recorded); for a journal without response headers configure default_s, \
                 by_status or by_rule to match the fault schedule"
                    .to_string(),
            )
        } else if self.checked == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no retry followed a response with a known Retry-After"
                    .to_string(),
            )
        } else {
            let short = if self.short_met > 0 {
                format!(
                    " ({} more met a Retry-After too short to tell, at most {:.0} ms)",
                    self.short_met,
                    self.short_max_s * 1000.0
                )
            } else {
                String::new()
            };
            (
                Verdict::Pass,
                format!(
                    "all {} retries waited for their Retry-After{short}",
                    self.checked
                ),
            )
        };
        let mut result = CheckResult::new("retry_after", verdict, summary)
            .metric("retries_checked", self.checked)
            .metric("too_early", self.findings.total())
            .metric("on_time_after_short_retry_after", self.short_met);
        if let Some(m) = self.smallest_margin_ms {
            result = result.metric("smallest_margin_ms", m);
        }
        attach(result, self.findings)
    }
}

impl CheckSpec for RetryAfterConfig {
    const NAME: &'static str = "retry_after";
    const ABOUT: About = About {
        catches: "clients that come back before they were told to",
        how: "next arrival minus the response's end, against the Retry-After of that response; a retry that meets a Retry-After of at most `immediate_ms` + `tolerance_ms` (100 ms) is no evidence, since a client that retries at once comes back as late after handling the response (only such retries: inconclusive, with the reason)",
        evidence: "a retry followed a response with a Retry-After long enough to tell waiting from retrying at once",
        limits: "reads the Retry-After the journal recorded with the response (the fault server records it; seconds or an HTTP-date); for a journal without it, from the config (`by_rule`, `by_status`, `default_s`, matching the schedule) or a journal field `retry_after_s`",
    };

    fn scale(&mut self, f: f64) {
        if let Some(d) = &mut self.default_s {
            *d *= f;
        }
        self.by_status.values_mut().for_each(|v| *v *= f);
        self.by_rule.values_mut().for_each(|v| *v *= f);
        self.recorded_scale *= f;
    }

    fn validate(&self) -> Result<(), Invalid> {
        if let Some(d) = self.default_s {
            non_negative("default_s", d)?;
        }
        for (status, s) in &self.by_status {
            non_negative(&format!("by_status.{status}"), *s)?;
        }
        for (rule, s) in &self.by_rule {
            non_negative(&format!("by_rule.{rule}"), *s)?;
        }
        non_negative("immediate_ms", self.immediate_ms)?;
        non_negative("recorded_scale", self.recorded_scale)
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(RetryAfterCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};
    use crate::{run_checks, ChecksConfig, JournalRecord};

    const NAME: &str = "retry_after";

    fn throttled_then(retry_at_ms: u32) -> Vec<history::Entry> {
        vec![
            entry(1, 0).key("k").status(429).took(1).build(),
            entry(2, retry_at_ms).key("k").created("o1").build(),
        ]
    }

    #[test]
    fn fails_a_retry_before_retry_after() {
        let r = run_one(NAME, "{ default_s: 1 }", &throttled_then(300));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
        assert_eq!(r.metrics["smallest_margin_ms"], -701.0);
    }

    #[test]
    fn reads_the_recorded_retry_after_and_skips_concurrent_requests_of_a_key() {
        // No configuration: the value is the one the response carried.
        let j = vec![
            entry(1, 0)
                .key("k")
                .status(503)
                .response_header("retry-after", "2")
                .took(1)
                .build(),
            entry(2, 1500).key("k").created("o1").build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("Retry-After 2"), "{}", r.summary);
        // Ten requests of one key sent together: the 409s' Retry-After could not have been seen
        // by the others, which were already on their way — and by other clients at all.
        let mut burst = vec![entry(1, 0.0).key("b").created("o1").took(5).build()];
        for i in 2..=10u64 {
            burst.push(
                entry(i, 0.1 * i as f64)
                    .key("b")
                    .status(409)
                    .response_header("retry-after", "1")
                    .took(5)
                    .build(),
            );
        }
        let r = run_one(NAME, "{}", &burst);
        assert_ne!(r.verdict, Verdict::Fail, "{}", r.summary);
        // Members that arrive just after a 409 was written, from clients of their own.
        let mut late = vec![entry(1, 0.0)
            .key("b")
            .client("c0")
            .created("o1")
            .took(5)
            .build()];
        for i in 2..=10u64 {
            late.push(
                entry(i, 6.0 * i as f64)
                    .key("b")
                    .client(&format!("c{i}"))
                    .status(409)
                    .response_header("retry-after", "1")
                    .took(0.5)
                    .build(),
            );
        }
        let r = run_one(NAME, "{}", &late);
        assert_ne!(r.verdict, Verdict::Fail, "{}", r.summary);
    }

    #[test]
    fn passes_a_retry_after_retry_after() {
        let r = run_one(NAME, "{ default_s: 1 }", &throttled_then(1001));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn borderline_tolerance_and_lookup_order() {
        // 960 ms after a 1 s Retry-After is within the default 50 ms tolerance; 940 is not.
        let r = run_one(NAME, "{ default_s: 1 }", &throttled_then(961));
        assert_eq!(r.verdict, Verdict::Pass);
        let r = run_one(NAME, "{ default_s: 1 }", &throttled_then(941));
        assert_eq!(r.verdict, Verdict::Fail);
        // A rule's value wins over the status's, which wins over the default.
        let mut j = throttled_then(1500);
        j[0].rule = Some("throttle".into());
        let cfg = "{ default_s: 1, by_status: { 429: 1 }, by_rule: { throttle: 2 } }";
        assert_eq!(run_one(NAME, cfg, &j).verdict, Verdict::Fail);
        let cfg = "{ default_s: 1, by_status: { 429: 2 } }";
        assert_eq!(run_one(NAME, cfg, &j).verdict, Verdict::Fail);
        // default_s applies only to the listed statuses.
        let cfg = "{ default_s: 1, statuses: [503] }";
        assert_eq!(run_one(NAME, cfg, &j).verdict, Verdict::Inconclusive);
    }

    /// A Retry-After of 80 ms (1 s in a scenario run at time scale 0.08): a client that ignores
    /// it and retries after 40 ms of handling is within the tolerance, as one that waited it is:
    /// neither passes, both are inconclusive with the reason; one that came back after 5 ms was
    /// early whatever its handling.
    #[test]
    fn a_retry_after_within_the_handling_time_cannot_tell() {
        let short = "{ default_s: 0.08 }";
        for (name, at) in [("ignored", 40), ("honoured", 120)] {
            let r = run_one(NAME, short, &throttled_then(1 + at));
            assert_eq!(r.verdict, Verdict::Inconclusive, "{name}: {}", r.summary);
            assert!(r.summary.starts_with("cannot tell"), "{}", r.summary);
            assert!(r.summary.contains("at most 80 ms"), "{}", r.summary);
        }
        let r = run_one(NAME, short, &throttled_then(6));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        // Recorded in the journal, `Retry-After: 0` cannot tell either.
        let j = vec![
            entry(1, 0)
                .key("k")
                .status(503)
                .response_header("retry-after", "0")
                .took(1)
                .build(),
            entry(2, 30).key("k").created("o1").build(),
        ];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Inconclusive);
        // A Retry-After long enough to tell is judged; retries after a short one beside it are
        // counted apart.
        let long = "{ by_status: { 429: 1, 503: 0.05 } }";
        assert_eq!(
            run_one(NAME, long, &throttled_then(41)).verdict,
            Verdict::Fail
        );
        let mut j = throttled_then(1041);
        j.push(entry(3, 5000).key("k2").status(503).took(1).build());
        j.push(entry(4, 5046).key("k2").created("o2").build());
        let r = run_one(NAME, long, &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(
            r.summary.contains("1 more met a Retry-After too short"),
            "{}",
            r.summary
        );
        // With no handling allowed for, 80 ms is judged.
        let r = run_one(
            NAME,
            "{ default_s: 0.08, immediate_ms: 0, tolerance_ms: 10 }",
            &throttled_then(41),
        );
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
    }

    #[test]
    fn nothing_known_is_inconclusive() {
        let r = run_one(NAME, "{}", &throttled_then(10));
        assert_eq!(r.verdict, Verdict::Inconclusive);
        assert!(r.summary.contains("configure"), "{}", r.summary);
    }

    #[test]
    fn a_journal_field_overrides_the_config() {
        let line = |seq, t: u64, status: u16, ra: &str| {
            format!(
                r#"{{"seq":{seq},"t_recv_us":{t},"t_done_us":{},"unix_ms":0,"method":"POST",
                "path":"/orders","idempotency_key":"k","outcome":"responded","status":{status}{ra}}}"#,
                t + 1000
            )
        };
        let records: Vec<JournalRecord> = [
            line(1, 0, 503, r#","retry_after_s":3"#),
            line(2, 2_000_000, 201, ""),
        ]
        .iter()
        .map(|l| serde_json::from_str(l).expect("valid test line"))
        .collect();
        let cfg = ChecksConfig::from_yaml("retry_after: { default_s: 1 }").expect("valid");
        let r = run_checks(&cfg, &records).remove(0);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
    }
}
