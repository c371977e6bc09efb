//! `cache_fallback`: what a service answers its client when its cache fails.
//!
//! Why: a cache is there to make a service faster, not to make it fail. When Redis answers
//! `-LOADING` (a restarted server still reading its dataset), `-READONLY` (a replica after a
//! failover), `-BUSY` (a script running), `-TRYAGAIN` or `-OOM`, or the connection drops, a
//! service that treats the cache as optional reads through to its database and answers as
//! usual — a miss, not a 5xx. Some services must fail instead (a cache that holds the only copy
//! of a session, a rate limiter that must not fail open): the scenario says which it expects.
//!
//! What the journal shows: the commands a Redis-aware proxy read, each with its reply's error
//! code or how its connection ended, and — with the fault server in front of the service — the
//! service's own HTTP requests. A failed command belongs to the one request whose span contains
//! it; that request's answer is judged once, whatever number of its commands failed. A failed
//! command that no request, or more than one, spans is counted (`unattributed`) and not judged.
//!
//! Metrics: `cache_failures`, `requests_judged`, `answered`, `failed`, `unattributed`.

use std::collections::VecDeque;

use history::{Entry, Facts, Outcome};
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// What the service should do with its request when its cache fails.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Answer its client as on a miss: any status below 500.
    #[default]
    Answer,
    /// Fail the request: a 5xx, or no answer.
    Fail,
}

/// Configuration of the `cache_fallback` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CacheFallbackConfig {
    /// `answer` (default: the service still answers, as on a miss) or `fail`.
    pub expect: Fallback,
    /// Redis error codes that mean the cache failed.
    pub errors: Vec<String>,
    /// A command whose reply never reached the service (dropped, reset, the connection lost)
    /// means the cache failed too.
    pub lost: bool,
    /// Only the service's requests under this path count (all when absent).
    pub path_prefix: Option<String>,
}

impl Default for CacheFallbackConfig {
    fn default() -> Self {
        CacheFallbackConfig {
            expect: Fallback::Answer,
            errors: ["LOADING", "READONLY", "BUSY", "TRYAGAIN", "OOM"]
                .map(String::from)
                .to_vec(),
            lost: true,
            path_prefix: None,
        }
    }
}

#[derive(Debug, Clone)]
struct Request {
    seq: u64,
    t_recv_us: u64,
    t_done_us: u64,
    status: Option<u16>,
    outcome: Outcome,
    answered: bool,
    judged: bool,
}

/// The `cache_fallback` check.
pub(crate) struct CacheFallbackCheck {
    cfg: CacheFallbackConfig,
    horizon_us: u64,
    requests: VecDeque<Request>,
    findings: Findings,
    cache_failures: u64,
    requests_judged: u64,
    answered: u64,
    failed: u64,
    unattributed: u64,
}

impl CacheFallbackCheck {
    fn observe_command(&mut self, e: &Entry) {
        let Some(c) = e.redis() else { return };
        if c.violation.is_some() {
            return;
        }
        let how = match &c.error {
            Some(code) if self.cfg.errors.iter().any(|x| x == code) => format!("-{code}"),
            _ if self.cfg.lost && e.outcome != Outcome::Responded => {
                format!("no reply ({})", e.outcome.as_str())
            }
            _ => return,
        };
        self.cache_failures += 1;
        let mut spanning = self
            .requests
            .iter_mut()
            .filter(|r| r.t_recv_us <= e.t_recv_us && r.t_done_us >= e.t_done_us);
        let (Some(r), None) = (spanning.next(), spanning.next()) else {
            self.unattributed += 1;
            return;
        };
        if r.judged {
            return;
        }
        r.judged = true;
        self.requests_judged += 1;
        let served = r.answered && r.status.is_some_and(|s| s < 500);
        let got = r.status.map_or_else(
            || format!("no answer ({})", r.outcome.as_str()),
            |s| s.to_string(),
        );
        let what = format!("{} {}", c.command, c.key.as_deref().unwrap_or(""));
        let what = what.trim_end();
        if served {
            self.answered += 1;
        } else {
            self.failed += 1;
        }
        match (self.cfg.expect, served) {
            (Fallback::Answer, false) => self.findings.push(
                format!(
                    "the cache failed ({what}: {how}, seq {}) and the service answered its client {got} (seq {}) instead of treating it as a miss",
                    e.seq, r.seq
                ),
                None,
                vec![e.seq, r.seq],
            ),
            (Fallback::Fail, true) => self.findings.push(
                format!(
                    "the cache failed ({what}: {how}, seq {}) and the service answered its client {got} (seq {}), where it was to fail the request",
                    e.seq, r.seq
                ),
                None,
                vec![e.seq, r.seq],
            ),
            _ => {}
        }
    }
}

impl Check for CacheFallbackCheck {
    fn name(&self) -> &'static str {
        CacheFallbackConfig::NAME
    }

    fn reads_protocol(&self) -> bool {
        true
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        if e.redis().is_some() {
            self.observe_command(e);
        } else if !e.is_protocol()
            && self
                .cfg
                .path_prefix
                .as_deref()
                .is_none_or(|p| e.path.starts_with(p))
        {
            self.requests.push_back(Request {
                seq: e.seq,
                t_recv_us: e.t_recv_us,
                t_done_us: e.t_done_us,
                status: e.status,
                outcome: e.outcome,
                answered: e.answered(),
                judged: false,
            });
        }
        let now = e.t_recv_us;
        while self
            .requests
            .front()
            .is_some_and(|r| r.t_done_us.saturating_add(self.horizon_us) < now)
        {
            self.requests.pop_front();
        }
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let expected = match self.cfg.expect {
            Fallback::Answer => "answered its client (a miss, not a 5xx)",
            Fallback::Fail => "failed the request",
        };
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} of {} requests whose cache failed were not handled as expected; first: {first}",
                    self.findings.total(),
                    self.requests_judged
                ),
            )
        } else if self.cache_failures == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no journaled cache command failed".to_string(),
            )
        } else if self.requests_judged == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: {} cache commands failed, none within exactly one of the service's requests in the journal",
                    self.cache_failures
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "each of {} requests whose cache failed {expected}",
                    self.requests_judged
                ),
            )
        };
        let result = CheckResult::new(CacheFallbackConfig::NAME, verdict, summary)
            .metric("cache_failures", self.cache_failures)
            .metric("requests_judged", self.requests_judged)
            .metric("answered", self.answered)
            .metric("failed", self.failed)
            .metric("unattributed", self.unattributed);
        attach(result, self.findings)
    }
}

impl CheckSpec for CacheFallbackConfig {
    const NAME: &'static str = "cache_fallback";
    const ABOUT: About = About {
        catches: "a service that fails its client when its cache fails (or serves when it should fail)",
        how: "each Redis command a Redis-aware proxy journaled with an error in `errors` (LOADING, READONLY, BUSY, TRYAGAIN, OOM) or without a reply (`lost`) belongs to the one service request whose span contains it; with `expect: answer` (default) that request must be answered below 500, with `expect: fail` with a 5xx or not at all",
        evidence: "a cache command failed inside exactly one of the service's requests in the journal",
        limits: "needs the service's own requests in the same journal (the fault server in front of it) and time to tell them apart: a failure spanned by several concurrent requests is counted `unattributed`, not judged",
    };

    fn validate(&self) -> Result<(), Invalid> {
        for (i, code) in self.errors.iter().enumerate() {
            if code.is_empty()
                || !code
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(Invalid::new(
                    format!("errors[{i}]"),
                    format!(
                        "{code:?} is not a Redis error code (an upper-case word such as LOADING)"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(CacheFallbackCheck {
            cfg: self.clone(),
            horizon_us: ctx.horizon_us,
            requests: VecDeque::new(),
            findings: Findings::new(ctx.max_evidence),
            cache_failures: 0,
            requests_judged: 0,
            answered: 0,
            failed: 0,
            unattributed: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use history::Outcome;
    use verdict::Verdict;

    use crate::testutil::{entry, in_arrival_order, run_one};

    const NAME: &str = "cache_fallback";

    /// A `GET /products/{n}` at `t_ms` answered `status` after 20 ms, which read the cache at
    /// `t_ms + 5` and got `cache` (an error code, or none for a hit).
    fn request(n: u64, t_ms: f64, status: u16, cache: Option<&str>) -> Vec<history::Entry> {
        let http = entry(0, t_ms)
            .at("GET", &format!("/products/{n}"))
            .took(20.0)
            .status(status)
            .build();
        let mut get = entry(0, t_ms + 5.0).redis(n, "GET", Some(&format!("product:{n}")));
        if let Some(code) = cache {
            get = get.redis_error(code);
        }
        vec![http, get.build()]
    }

    fn journal(parts: Vec<Vec<history::Entry>>) -> Vec<history::Entry> {
        in_arrival_order(parts.into_iter().flatten().collect())
    }

    #[test]
    fn passes_a_service_that_treats_loading_as_a_miss() {
        let j = journal(vec![
            request(1, 0.0, 200, None),
            request(2, 100.0, 200, Some("LOADING")),
            request(3, 200.0, 200, Some("READONLY")),
        ]);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["requests_judged"], 2);
    }

    #[test]
    fn fails_a_service_that_answers_503_when_its_cache_is_loading() {
        let j = journal(vec![
            request(1, 0.0, 200, None),
            request(2, 100.0, 503, Some("LOADING")),
        ]);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(
            r.summary.contains("-LOADING") && r.summary.contains("503"),
            "{}",
            r.summary
        );
        assert_eq!(r.evidence[0].seqs.len(), 2);
    }

    #[test]
    fn a_lost_reply_counts_and_expect_fail_turns_the_verdict_around() {
        let mut dropped = request(2, 100.0, 500, None);
        dropped[1].outcome = Outcome::Dropped;
        let j = journal(vec![dropped]);
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Fail);
        run_one(NAME, "{ expect: fail }", &j).assert_passes();
        let served = journal(vec![request(2, 100.0, 200, Some("LOADING"))]);
        assert_eq!(
            run_one(NAME, "{ expect: fail }", &served).verdict,
            Verdict::Fail
        );
    }

    #[test]
    fn overlapping_requests_are_not_guessed_at_and_no_failure_is_inconclusive() {
        let j = journal(vec![
            request(1, 0.0, 503, Some("LOADING")),
            // A second request spanning the same moment.
            vec![entry(0, 1.0)
                .at("GET", "/other")
                .took(30.0)
                .status(200)
                .build()],
        ]);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert_eq!(r.metrics["unattributed"], 1);
        let r = run_one(NAME, "{ path_prefix: /products }", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        let quiet = journal(vec![request(1, 0.0, 200, None)]);
        assert_eq!(run_one(NAME, "{}", &quiet).verdict, Verdict::Inconclusive);
    }
}
