//! `idempotency_semantics`: the Idempotency-Key protocol, answer by answer.
//!
//! Why: `duplicates` proves the effect happened once; this check proves the client was told the
//! truth each time, as the IETF draft and Stripe specify. A key must create exactly one resource
//! (one 201). A retry after the first request completed must get the stored result — a `200` replay
//! (journal `replayed: true`), not a `409` and not a fresh `201`. A request racing the first one may
//! get `409` (the server should send Retry-After; the journal records no response headers, so only
//! the status is checked) or a replay, but never a `5xx`: a unique-constraint violation surfacing as
//! a 500 tells the loser of the race that its payment failed when it did not. The same key with a
//! different body must be refused (`422`; any 2xx fails). A request missing a required key must be
//! refused (`400`; any non-4xx fails), configured with `require_key_paths`.
//!
//! Responses injected by the fault schedule (`fault` of `status`, `hang`, `reset`, `malformed`)
//! say nothing about the implementation and are not judged, but what such a request created still
//! counts; `drop` and `delay` responses are judged like any other (a dropped request was
//! processed).
//!
//! Metrics: `keys`, `creations`, `replays`, `conflicts_409`, `mismatches`, `missing_key_requests`,
//! `violations`.

use reports::{CheckResult, Verdict};
use serde::{Deserialize, Serialize};

use super::evidence::{attach, Findings};
use super::idle::{hash_key, IdleMap};
use super::spec::{About, CheckSpec};
use super::{Attempt, Check, Context};
use history::{Entry, Facts};

/// Configuration of the `idempotency_semantics` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdempotencySemanticsConfig {
    /// Statuses a replay may carry (the contract says `200` for a replayed creation).
    pub replay_statuses: Vec<u16>,
    /// Paths (exact) where the key is required; empty: the key is optional everywhere.
    pub require_key_paths: Vec<String>,
    /// Methods the requirement applies to.
    pub require_key_methods: Vec<String>,
}

impl Default for IdempotencySemanticsConfig {
    fn default() -> Self {
        IdempotencySemanticsConfig {
            replay_statuses: vec![200],
            require_key_paths: Vec::new(),
            require_key_methods: vec!["POST".to_string()],
        }
    }
}

/// One keyed request, as much as the judgement needs.
#[derive(Debug)]
struct Req {
    seq: u64,
    t_recv_us: u64,
    t_done_us: u64,
    status: Option<u16>,
    replayed: bool,
    created: Option<String>,
    /// Hash of the body's SHA-256 (only compared, never shown).
    body: Option<u64>,
}

/// True when the schedule, not the implementation, chose the response.
fn injected(e: &Entry) -> bool {
    e.fault
        .as_deref()
        .is_some_and(|f| f != "delay" && f != "drop")
}

/// The `idempotency_semantics` check.
pub(crate) struct IdempotencySemanticsCheck {
    cfg: IdempotencySemanticsConfig,
    keys: IdleMap<String, Vec<Req>>,
    now_us: u64,
    findings: Findings,
    n_keys: u64,
    creations: u64,
    replays: u64,
    conflicts: u64,
    mismatches: u64,
    missing_key: u64,
}

impl IdempotencySemanticsCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &IdempotencySemanticsConfig, ctx: Context) -> Self {
        IdempotencySemanticsCheck {
            cfg: cfg.clone(),
            keys: IdleMap::new(ctx.horizon_us),
            now_us: 0,
            findings: Findings::new(ctx.max_evidence),
            n_keys: 0,
            creations: 0,
            replays: 0,
            conflicts: 0,
            mismatches: 0,
            missing_key: 0,
        }
    }

    fn check_missing_key(&mut self, e: &Entry) {
        let required = self.cfg.require_key_paths.contains(&e.path)
            && self
                .cfg
                .require_key_methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(&e.method));
        if !required || injected(e) {
            return;
        }
        let Some(status) = e.status else { return };
        self.missing_key += 1;
        if !(400..500).contains(&status) {
            self.findings.push(
                format!(
                    "{} {} without an Idempotency-Key was answered {status}, expected 400",
                    e.method, e.path
                ),
                None,
                vec![e.seq],
            );
        }
    }

    fn judge(&mut self, key: String, reqs: Vec<Req>) {
        self.n_keys += 1;
        if let [only] = reqs.as_slice() {
            // One request: nothing to race, replay or mismatch.
            self.creations += u64::from(only.created.is_some());
            return;
        }
        let mut ids: Vec<(&str, u64)> = Vec::new();
        for r in &reqs {
            if let Some(id) = &r.created {
                if !ids.iter().any(|(c, _)| *c == id) {
                    ids.push((id, r.seq));
                }
            }
        }
        self.creations += ids.len() as u64;
        if ids.len() > 1 {
            let names: Vec<&str> = ids.iter().map(|(id, _)| *id).collect();
            self.findings.push(
                format!(
                    "key {key}: {} resources created ({}), expected exactly one",
                    ids.len(),
                    names.join(", ")
                ),
                Some(key.clone()),
                ids.iter().map(|(_, s)| *s).collect(),
            );
        }
        let fresh_201: Vec<u64> = reqs
            .iter()
            .filter(|r| r.status == Some(201) && !r.replayed)
            .map(|r| r.seq)
            .collect();
        if fresh_201.len() > 1 && ids.len() <= 1 {
            self.findings.push(
                format!(
                    "key {key}: {} requests answered 201, expected exactly one",
                    fresh_201.len()
                ),
                Some(key.clone()),
                fresh_201,
            );
        }
        let creator = reqs.iter().find(|r| r.created.is_some());
        let original_body = creator.or(reqs.first()).and_then(|r| r.body);
        for r in &reqs {
            let Some(status) = r.status else { continue };
            if creator.is_some_and(|c| c.seq == r.seq) {
                continue;
            }
            let ok = (200..300).contains(&status);
            if r.body.is_some() && original_body.is_some() && r.body != original_body {
                self.mismatches += 1;
                if ok {
                    self.findings.push(
                        format!(
                            "key {key}: reused with a different body and answered {status}, \
                             expected 422"
                        ),
                        Some(key.clone()),
                        vec![r.seq],
                    );
                }
                continue;
            }
            if status >= 500 {
                let raced = reqs.iter().any(|o| {
                    o.seq != r.seq && o.t_recv_us < r.t_done_us && r.t_recv_us < o.t_done_us
                });
                if raced {
                    self.findings.push(
                        format!(
                            "key {key}: a request racing another with the same key got {status}; \
                             the loser of a race must get 409 or the stored result"
                        ),
                        Some(key.clone()),
                        vec![r.seq],
                    );
                }
                continue;
            }
            let after_completion = creator.is_some_and(|c| r.t_recv_us >= c.t_done_us);
            if r.replayed && self.cfg.replay_statuses.contains(&status) {
                self.replays += 1;
            } else if status == 409 && after_completion {
                self.findings.push(
                    format!(
                        "key {key}: answered 409 after the first request had completed; \
                         expected a 200 replay of the stored result"
                    ),
                    Some(key.clone()),
                    vec![r.seq],
                );
            } else if status == 409 {
                self.conflicts += 1;
            } else if r.replayed {
                self.findings.push(
                    format!(
                        "key {key}: replay answered {status}, expected {:?}",
                        self.cfg.replay_statuses
                    ),
                    Some(key.clone()),
                    vec![r.seq],
                );
            } else if ok && after_completion && r.created.is_none() {
                self.findings.push(
                    format!(
                        "key {key}: a retry after completion answered {status} without \
                         Idempotent-Replayed; expected a 200 replay"
                    ),
                    Some(key.clone()),
                    vec![r.seq],
                );
            }
        }
    }
}

impl Check for IdempotencySemanticsCheck {
    fn name(&self) -> &'static str {
        "idempotency_semantics"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.now_us = self.now_us.max(e.t_recv_us);
        let mut expired = Vec::new();
        self.keys.expire(self.now_us, |k, v| expired.push((k, v)));
        for (k, v) in expired {
            self.judge(k, v);
        }
        let Some(key) = &e.idempotency_key else {
            self.check_missing_key(e);
            return;
        };
        self.keys
            .touch(key, e.t_recv_us.max(e.t_done_us), Vec::new)
            .push(Req {
                seq: e.seq,
                t_recv_us: e.t_recv_us,
                t_done_us: e.t_done_us,
                // The schedule's answer says nothing about the implementation; what the request
                // created still counts.
                status: if injected(e) { None } else { e.status },
                replayed: e.replayed,
                created: e.created.clone(),
                body: e.body_sha256.as_deref().map(hash_key),
            });
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        let keys = std::mem::replace(&mut self.keys, IdleMap::new(0));
        for (k, v) in keys.drain() {
            self.judge(k, v);
        }
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} idempotency violations; first: {first}",
                    self.findings.total()
                ),
            )
        } else if self.n_keys == 0 && self.missing_key == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no request carried an idempotency key".to_string(),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "{} keys: {} created once, {} replays, {} conflicts (409), {} body mismatches \
                     refused, {} missing keys refused",
                    self.n_keys,
                    self.creations,
                    self.replays,
                    self.conflicts,
                    self.mismatches,
                    self.missing_key
                ),
            )
        };
        let result = CheckResult::new("idempotency_semantics", verdict, summary)
            .metric("keys", self.n_keys)
            .metric("creations", self.creations)
            .metric("replays", self.replays)
            .metric("conflicts_409", self.conflicts)
            .metric("mismatches", self.mismatches)
            .metric("missing_key_requests", self.missing_key)
            .metric("violations", self.findings.total());
        attach(result, self.findings)
    }
}

impl CheckSpec for IdempotencySemanticsConfig {
    const NAME: &'static str = "idempotency_semantics";
    const ABOUT: About = About {
        catches: "a protocol that lies to the client",
        how: "per key: exactly one 201; replays `200` (`replayed`); races answered 409 or replay, never 5xx; a different body with the same key refused (422; 2xx fails); a missing key refused (400) where `require_key_paths` says it is required",
        limits: "the journal records no response headers, so 409's Retry-After is checked by `harness idempotency`, not here; responses replaced by a fault are skipped",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(IdempotencySemanticsCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Outcome;
    use reports::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "idempotency_semantics";

    /// Seed exercise 3 done right: one 201, concurrent 409s, later 200 replays.
    fn correct_burst() -> Vec<history::Entry> {
        let mut j = vec![entry(1, 0)
            .key("k")
            .body("b")
            .took(50)
            .created("o1")
            .build()];
        for i in 2..=5 {
            j.push(entry(i, i as f64).key("k").body("b").status(409).build());
        }
        for i in 6..=10 {
            j.push(
                entry(i, 100 + i as u32)
                    .key("k")
                    .body("b")
                    .replayed()
                    .build(),
            );
        }
        j
    }

    #[test]
    fn passes_one_creation_conflicts_and_replays() {
        let r = run_one(NAME, "{}", &correct_burst());
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["creations"], 1);
        assert_eq!(r.metrics["conflicts_409"], 4);
        assert_eq!(r.metrics["replays"], 5);
    }

    #[test]
    fn passes_a_replay_after_a_dropped_creation() {
        let j = [
            entry(1, 0)
                .key("k")
                .body("b")
                .created("o1")
                .no_response(Outcome::Dropped)
                .build(),
            entry(2, 500).key("k").body("b").replayed().build(),
        ];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Pass);
    }

    #[test]
    fn fails_two_creations_for_one_key() {
        let mut j = correct_burst();
        j[1] = entry(2, 2).key("k").body("b").created("o2").build();
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
    }

    #[test]
    fn fails_a_5xx_to_the_loser_of_a_race() {
        let mut j = correct_burst();
        j[1] = entry(2, 2).key("k").body("b").status(500).build();
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.summary.contains("race"), "{}", r.summary);
        assert_eq!(r.evidence[0].seqs, vec![2]);
    }

    #[test]
    fn fails_409_or_fresh_success_after_completion() {
        let mut j = correct_burst();
        j[9] = entry(10, 200).key("k").body("b").status(409).build();
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.summary.contains("after the first request had completed"));

        let mut j = correct_burst();
        j[9] = entry(10, 200).key("k").body("b").status(200).build();
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Fail);
    }

    #[test]
    fn different_body_must_not_succeed() {
        let mut j = correct_burst();
        j.push(entry(11, 300).key("k").body("other").status(422).build());
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass);
        assert_eq!(r.metrics["mismatches"], 1);

        j.pop();
        j.push(entry(11, 300).key("k").body("other").replayed().build());
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.summary.contains("different body"));
    }

    #[test]
    fn missing_key_when_required() {
        let cfg = "{ require_key_paths: [/orders] }";
        let refused = [entry(1, 0).status(400).build()];
        assert_eq!(run_one(NAME, cfg, &refused).verdict, Verdict::Pass);
        let accepted = [entry(1, 0).created("o1").build()];
        let r = run_one(NAME, cfg, &accepted);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.evidence[0].seqs, vec![1]);
        // Not required by default: the same journal is merely inconclusive.
        assert_eq!(
            run_one(NAME, "{}", &accepted).verdict,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn borderline_injected_faults_are_not_the_implementations_answer() {
        // A scheduled 503 racing the creator is the fault schedule talking, not the server.
        let mut j = correct_burst();
        j[1] = entry(2, 2)
            .key("k")
            .body("b")
            .status(503)
            .fault("r1", "status")
            .build();
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Pass);
        // But what a request with an injected response created still counts.
        let j = [
            entry(1, 0)
                .key("k")
                .body("b")
                .created("o1")
                .no_response(Outcome::Reset)
                .fault("r2", "malformed")
                .build(),
            entry(2, 100).key("k").body("b").created("o2").build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
    }
}
