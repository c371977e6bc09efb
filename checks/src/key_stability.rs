//! `key_stability`: the same request retried under a new Idempotency-Key.
//!
//! Why: the key is what lets the server recognise a retry. A client that generates a fresh key per
//! attempt (or drops it on retry) silently disables the protection: after a lost response its retry
//! looks like a new order and the customer pays twice, while every other check still passes. The
//! key must be generated once per logical operation and reused on every attempt.
//!
//! Detection: a request with the same `x-client-id`, method, path and body hash as a *failed*
//! request (error status or no response) from at most `window_ms` earlier is a retry of it; when
//! either carried a key and the keys differ, the key was not stable. A client that sends the very
//! same body again on purpose after a failure (a second identical order) is indistinguishable here;
//! shorten `window_ms` if that happens in a scenario.
//!
//! Metrics: `retries_checked`, `key_changes`.

use history::{Entry, Facts};
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::failure;
use super::idle::{hash_key, IdleMap};
use super::spec::{scale_ms, About, CheckSpec};
use super::{Attempt, Check, Context};

/// Configuration of the `key_stability` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct KeyStabilityConfig {
    /// Longest pause after a failure for a same-fingerprint request to count as its retry (ms).
    pub window_ms: u64,
}

impl Default for KeyStabilityConfig {
    fn default() -> Self {
        KeyStabilityConfig { window_ms: 60_000 }
    }
}

#[derive(Debug)]
struct Last {
    key: Option<String>,
    seq: u64,
    t_done_us: u64,
}

/// The `key_stability` check.
pub(crate) struct KeyStabilityCheck {
    window_us: u64,
    /// Last request per fingerprint (client, method, path, body), keyed by its hash.
    last: IdleMap<u64, Last>,
    now_us: u64,
    findings: Findings,
    checked: u64,
}

/// A hash of client, method, path and body: the fingerprint without copying four strings.
fn fingerprint(e: &Entry) -> Option<u64> {
    Some(hash_key(&(
        e.client_id.as_ref()?,
        &e.method,
        &e.path,
        e.body_sha256.as_ref()?,
    )))
}

impl KeyStabilityCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &KeyStabilityConfig, ctx: Context) -> Self {
        KeyStabilityCheck {
            window_us: cfg.window_ms.saturating_mul(1000),
            last: IdleMap::new(ctx.horizon_us.max(cfg.window_ms.saturating_mul(1000))),
            now_us: 0,
            findings: Findings::new(ctx.max_evidence),
            checked: 0,
        }
    }
}

impl Check for KeyStabilityCheck {
    fn name(&self) -> &'static str {
        "key_stability"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.now_us = self.now_us.max(e.t_recv_us);
        self.last.expire(self.now_us, |_, _| {});
        let Some(fp) = fingerprint(e) else { return };
        if let Some(prev) = self.last.get(&fp) {
            let is_retry =
                e.t_recv_us >= prev.t_done_us && e.t_recv_us - prev.t_done_us <= self.window_us;
            if is_retry && (prev.key.is_some() || e.idempotency_key.is_some()) {
                self.checked += 1;
                if prev.key != e.idempotency_key {
                    let show = |k: &Option<String>| k.as_deref().unwrap_or("(none)").to_string();
                    self.findings.push(
                        format!(
                            "client {} retried {} {} with key {} after key {} failed",
                            e.client_id.as_deref().unwrap_or_default(),
                            e.method,
                            e.path,
                            show(&e.idempotency_key),
                            show(&prev.key)
                        ),
                        e.idempotency_key.clone().or_else(|| prev.key.clone()),
                        vec![prev.seq, e.seq],
                    );
                }
            }
        }
        // Only a failed request can be retried: a success clears the fingerprint.
        if failure::failed(e) {
            let last = self.last.touch(&fp, e.t_recv_us.max(e.t_done_us), || Last {
                key: None,
                seq: 0,
                t_done_us: 0,
            });
            *last = Last {
                key: e.idempotency_key.clone(),
                seq: e.seq,
                t_done_us: e.t_done_us,
            };
        } else {
            self.last.remove(&fp);
        }
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} of {} retries changed their idempotency key; first: {first}",
                    self.findings.total(),
                    self.checked
                ),
            )
        } else if self.checked == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no keyed request was retried after a failure (same client \
                 and body)"
                    .to_string(),
            )
        } else {
            (
                Verdict::Pass,
                format!("all {} retries kept their idempotency key", self.checked),
            )
        };
        let result = CheckResult::new("key_stability", verdict, summary)
            .metric("retries_checked", self.checked)
            .metric("key_changes", self.findings.total());
        attach(result, self.findings)
    }
}

impl CheckSpec for KeyStabilityConfig {
    const NAME: &'static str = "key_stability";
    const ABOUT: About = About {
        catches: "a new key per attempt",
        how: "a request with the same `x-client-id`, method, path and body as a *failed* one within `window_ms`, under a different key",
        evidence: "a keyed request was retried after a failure (same client, method, path and body)",
        limits: "a client that deliberately repeats an identical order right after a failure looks the same",
    };

    fn scale(&mut self, f: f64) {
        scale_ms(&mut self.window_ms, f);
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(KeyStabilityCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Outcome;
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "key_stability";

    #[test]
    fn fails_a_new_key_per_attempt() {
        let j = [
            entry(1, 0)
                .client("c")
                .body("b")
                .key("k1")
                .no_response(Outcome::Dropped)
                .build(),
            entry(2, 500)
                .client("c")
                .body("b")
                .key("k2")
                .created("o2")
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
        assert_eq!(r.evidence[0].key.as_deref(), Some("k2"));
    }

    #[test]
    fn fails_a_retry_that_drops_the_key() {
        let j = [
            entry(1, 0)
                .client("c")
                .body("b")
                .key("k1")
                .status(503)
                .build(),
            entry(2, 500).client("c").body("b").created("o2").build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.summary.contains("(none)"), "{}", r.summary);
    }

    #[test]
    fn passes_a_reused_key() {
        let j = [
            entry(1, 0)
                .client("c")
                .body("b")
                .key("k1")
                .status(503)
                .build(),
            entry(2, 500)
                .client("c")
                .body("b")
                .key("k1")
                .created("o1")
                .build(),
        ];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Pass);
    }

    #[test]
    fn borderline_success_window_and_other_clients() {
        let j = [
            // A new key after a success is a new operation (two identical orders).
            entry(1, 0)
                .client("c")
                .body("b")
                .key("k1")
                .created("o1")
                .build(),
            entry(2, 10)
                .client("c")
                .body("b")
                .key("k2")
                .created("o2")
                .build(),
            // Another client's identical body is not this client's retry.
            entry(3, 20)
                .client("c")
                .body("x")
                .key("k3")
                .status(503)
                .build(),
            entry(4, 30)
                .client("d")
                .body("x")
                .key("k4")
                .created("o3")
                .build(),
            // Beyond the window: not a retry.
            entry(5, 100)
                .client("e")
                .body("y")
                .key("k5")
                .status(503)
                .build(),
            entry(6, 70_000)
                .client("e")
                .body("y")
                .key("k6")
                .created("o4")
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        let r = run_one(NAME, "{ window_ms: 100000 }", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
    }
}
