//! `amplification`: how many calls reach the bottom of the stack for one user request.
//!
//! Why: retries multiply across layers. Three layers that each try 4 times (1 + 3 retries) send
//! 4 × 4 × 4 = 64 calls to the bottom for one user request; four layers send 256 (seed exercise 2).
//! A dependency that is slow because it is overloaded then receives 64 times the load. The fix is to
//! retry at one layer only, with a retry budget and deadline propagation; this check measures
//! whether that holds.
//!
//! Counting: bottom requests are the journal entries that match `bottom_path_prefix` and
//! `bottom_header` (both optional; with neither, every entry — the fault server is the bottom when a
//! service under test calls it). Top requests are `top_requests` when configured, else the
//! operations the load driver started (the history's [`history::ClientFigures`]), else the number
//! of distinct `request_id_header` values among bottom requests (each layer must propagate the id). `bottom_attempts_per_request` = bottom / top, failing above
//! `max_attempts_per_request` (default 4: one layer with three retries). A request id idle longer
//! than the horizon and seen again counts as a new request.
//!
//! Evidence: amplification needs something to amplify. With no failure at the bottom (no 5xx,
//! 408, 429 and no lost response) no layer had a reason to retry, 1.0 attempts per request says
//! nothing about the retry policies, and the check is inconclusive; a ratio over the limit fails
//! whatever the cause.
//!
//! Metrics: `bottom_attempts`, `top_requests`, `bottom_attempts_per_request`,
//! `max_attempts_for_one_request`, `failed_bottom_attempts`.

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::idle::IdleMap;
use super::spec::{non_negative, About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `amplification` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AmplificationConfig {
    /// Bottom requests have a path starting with this.
    pub bottom_path_prefix: Option<String>,
    /// Bottom requests carry this header (lower-case name).
    pub bottom_header: Option<String>,
    /// Header carrying the top request's id, propagated down the layers.
    pub request_id_header: String,
    /// Number of top requests, when the driver knows it (overrides counting ids).
    pub top_requests: Option<u64>,
    /// Highest allowed bottom attempts per top request.
    pub max_attempts_per_request: f64,
}

impl Default for AmplificationConfig {
    fn default() -> Self {
        AmplificationConfig {
            bottom_path_prefix: None,
            bottom_header: None,
            request_id_header: "x-request-id".to_string(),
            top_requests: None,
            max_attempts_per_request: 4.0,
        }
    }
}

/// Seqs kept per request id for the evidence.
const SEQS: usize = 10;

#[derive(Debug, Default)]
struct PerRequest {
    attempts: u64,
    /// The first `SEQS` seqs (no allocation per request).
    seqs: [u64; SEQS],
}

/// The `amplification` check.
pub(crate) struct AmplificationCheck {
    cfg: AmplificationConfig,
    max_evidence: usize,
    ids: IdleMap<String, PerRequest>,
    now_us: u64,
    bottom: u64,
    /// Bottom requests that failed in a way a layer above would retry.
    failed_bottom: u64,
    distinct: u64,
    max_one: u64,
    /// The requests with the most bottom attempts: (attempts, id, first seqs), most first.
    worst: Vec<(u64, String, Vec<u64>)>,
}

impl AmplificationCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &AmplificationConfig, ctx: Context) -> Self {
        AmplificationCheck {
            cfg: cfg.clone(),
            max_evidence: ctx.max_evidence,
            ids: IdleMap::new(ctx.horizon_us),
            now_us: 0,
            bottom: 0,
            failed_bottom: 0,
            distinct: 0,
            max_one: 0,
            worst: Vec::new(),
        }
    }

    fn close(&mut self, id: String, r: PerRequest) {
        self.distinct += 1;
        self.max_one = self.max_one.max(r.attempts);
        let pos = self.worst.partition_point(|(n, _, _)| *n >= r.attempts);
        if pos < self.max_evidence {
            let kept = (r.attempts as usize).min(SEQS);
            let seqs = r.seqs.get(..kept).unwrap_or_default().to_vec();
            self.worst.insert(pos, (r.attempts, id, seqs));
            self.worst.truncate(self.max_evidence);
        }
    }
}

impl Check for AmplificationCheck {
    fn name(&self) -> &'static str {
        "amplification"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.now_us = self.now_us.max(e.t_recv_us);
        let mut expired = Vec::new();
        self.ids.expire(self.now_us, |k, v| expired.push((k, v)));
        for (k, v) in expired {
            self.close(k, v);
        }
        let is_bottom = self
            .cfg
            .bottom_path_prefix
            .as_ref()
            .is_none_or(|p| e.path.starts_with(p.as_str()))
            && self
                .cfg
                .bottom_header
                .as_ref()
                .is_none_or(|h| e.headers.contains_key(h));
        if !is_bottom {
            return;
        }
        self.bottom += 1;
        if super::failure::is_transient(e) {
            self.failed_bottom += 1;
        }
        if let Some(id) = e.headers.get(&self.cfg.request_id_header) {
            let r = self
                .ids
                .touch(id, e.t_recv_us.max(e.t_done_us), PerRequest::default);
            if let Some(slot) = r.seqs.get_mut(r.attempts as usize) {
                *slot = e.seq;
            }
            r.attempts += 1;
        }
    }

    fn finish(mut self: Box<Self>, facts: &Facts) -> CheckResult {
        let ids = std::mem::replace(&mut self.ids, IdleMap::new(0));
        for (k, v) in ids.drain() {
            self.close(k, v);
        }
        // The driver knows how many requests it sent to the top; without it, the distinct ids.
        let top = self
            .cfg
            .top_requests
            .or(facts.client.as_ref().map(|c| c.operations))
            .unwrap_or(self.distinct);
        let mut result;
        if self.bottom == 0 || top == 0 {
            let why = if self.bottom == 0 {
                "no bottom request in the journal".to_string()
            } else {
                format!(
                    "no bottom request carried {}; set top_requests",
                    self.cfg.request_id_header
                )
            };
            result = CheckResult::new(
                "amplification",
                Verdict::Inconclusive,
                format!("not enough data: {why}"),
            );
        } else {
            let ratio = self.bottom as f64 / top as f64;
            let failed = ratio > self.cfg.max_attempts_per_request;
            let summary = format!(
                "{ratio:.1} bottom attempts per request ({} attempts for {top} requests; at most \
                 {} allowed{})",
                self.bottom,
                self.cfg.max_attempts_per_request,
                if self.max_one > 0 {
                    format!("; worst request: {}", self.max_one)
                } else {
                    String::new()
                }
            );
            let (verdict, summary) = if failed {
                (Verdict::Fail, summary)
            } else if self.failed_bottom == 0 {
                (
                    Verdict::Inconclusive,
                    format!(
                        "not enough data: no bottom request failed, so no layer had a reason to                          retry ({summary})"
                    ),
                )
            } else {
                (Verdict::Pass, summary)
            };
            result = CheckResult::new("amplification", verdict, summary)
                .metric("bottom_attempts_per_request", ratio)
                .metric("failed_bottom_attempts", self.failed_bottom);
            if failed {
                let mut findings = Findings::new(self.max_evidence);
                for (n, id, seqs) in std::mem::take(&mut self.worst) {
                    findings.push(
                        format!("request {id} reached the bottom {n} times"),
                        Some(id),
                        seqs,
                    );
                }
                result = attach(result, findings);
            }
        }
        result
            .metric("bottom_attempts", self.bottom)
            .metric("top_requests", top)
            .metric("max_attempts_for_one_request", self.max_one)
    }
}

impl CheckSpec for AmplificationConfig {
    const NAME: &'static str = "amplification";
    const ABOUT: About = About {
        catches: "retries multiplied across layers",
        how: "bottom requests (path prefix / header) per top request (`top_requests` from the driver, or distinct `x-request-id`); metric `bottom_attempts_per_request`, fails above `max_attempts_per_request`",
        evidence: "at least one bottom request failed (5xx, 408, 429 or no response): something a layer could retry",
        limits: "the ids must be propagated when the driver does not count",
    };

    fn validate(&self) -> Result<(), Invalid> {
        non_negative("max_attempts_per_request", self.max_attempts_per_request)
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(AmplificationCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Entry;
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "amplification";

    /// `requests` top requests, each reaching the bottom `per_request` times.
    fn calls(requests: u32, per_request: u32) -> Vec<Entry> {
        let mut j = Vec::new();
        for r in 0..requests {
            for i in 0..per_request {
                let seq = (r * per_request + i + 1) as u64;
                j.push(
                    entry(seq, seq as u32)
                        .at("GET", "/inventory/1")
                        .header("x-request-id", &format!("req-{r}"))
                        .status(503)
                        .build(),
                );
            }
        }
        j
    }

    #[test]
    fn fails_three_retrying_layers() {
        // 4 x 4 x 4 = 64 bottom calls per user request.
        let r = run_one(NAME, "{}", &calls(5, 64));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["bottom_attempts_per_request"], 64.0);
        assert_eq!(r.metrics["max_attempts_for_one_request"], 64);
        assert_eq!(r.evidence.len(), 5);
        assert_eq!(r.evidence[0].seqs.len(), 10);
    }

    #[test]
    fn passes_retries_at_one_layer() {
        let r = run_one(NAME, "{}", &calls(5, 4));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(r.evidence.is_empty());
    }

    #[test]
    fn bottom_selection_and_provided_top_count() {
        let mut j = calls(2, 3);
        // Top-layer traffic in the same journal is not bottom traffic.
        j.push(entry(100, 100).at("POST", "/orders").build());
        let cfg = "{ bottom_path_prefix: /inventory, top_requests: 1 }";
        let r = run_one(NAME, cfg, &j);
        assert_eq!(r.metrics["bottom_attempts"], 6);
        assert_eq!(r.verdict, Verdict::Fail);
        let r = run_one(NAME, "{ bottom_header: x-request-id }", &j);
        assert_eq!(r.metrics["bottom_attempts_per_request"], 3.0);
    }

    #[test]
    fn borderline_exactly_at_the_limit_passes_and_no_ids_is_inconclusive() {
        let r = run_one(NAME, "{ max_attempts_per_request: 3 }", &calls(2, 3));
        assert_eq!(r.verdict, Verdict::Pass);
        let anonymous = [entry(1, 0).build(), entry(2, 1).build()];
        let r = run_one(NAME, "{}", &anonymous);
        assert_eq!(r.verdict, Verdict::Inconclusive);
        assert!(r.summary.contains("top_requests"), "{}", r.summary);
    }

    /// Ten requests that all succeeded at once: no layer had a reason to retry, and 1.0 attempts
    /// per request says nothing about the policies. Not a pass.
    #[test]
    fn nothing_failed_so_nothing_was_amplified() {
        let j: Vec<Entry> = (1..=10)
            .map(|i| {
                entry(i, i as u32)
                    .header("x-request-id", &format!("r{i}"))
                    .status(200)
                    .build()
            })
            .collect();
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(
            r.summary.contains("no bottom request failed"),
            "{}",
            r.summary
        );
        assert_eq!(r.metrics["failed_bottom_attempts"], 0);
        // One lost response among them is something to retry: now the ratio is evidence.
        let mut j = j;
        j[3] = entry(4, 4)
            .header("x-request-id", "r4")
            .no_response(history::Outcome::Dropped)
            .build();
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Pass);
    }

    #[test]
    fn the_drivers_operation_count_is_the_top_when_ids_are_not_propagated() {
        use history::{ClientFigures, Facts};
        // 64 bottom calls that carry no request id: alone, the journal cannot say how many user
        // requests they served.
        let j: Vec<Entry> = (1..=64)
            .map(|i| entry(i, i as u32).status(503).build())
            .collect();
        let alone = run_one(NAME, "{}", &j);
        assert_eq!(alone.verdict, Verdict::Inconclusive, "{}", alone.summary);
        let facts = Facts {
            client: Some(ClientFigures {
                operations: 1,
                failed_operations: 0,
                sent: 1,
                completed: 1,
                failed_attempts: 0,
                transport_errors: 0,
                latency: hdrhistogram::Histogram::new(3).expect("histogram"),
                duration: std::time::Duration::from_secs(1),
            }),
            ..Facts::default()
        };
        let r = crate::testutil::judge_one(NAME, "{}", &j, &facts);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["top_requests"], 1);
        assert_eq!(r.metrics["bottom_attempts_per_request"], 64.0);
        // A configured count wins over the driver's.
        let r = crate::testutil::judge_one(NAME, "{ top_requests: 16 }", &j, &facts);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }
}
