//! `idempotency_semantics`: the Idempotency-Key protocol, answer by answer.
//!
//! Why: `duplicates` proves the effect happened once; this check proves the client was told the
//! truth each time, as the IETF draft and Stripe specify. A key must create exactly one resource
//! (one 201). A retry after the first request completed must get the stored result — a `200` replay
//! (journal `replayed: true`), not a `409`, an error or a fresh `201`. A request racing the first one
//! may get `409` with Retry-After or a replay, but never a `5xx` or no answer: a unique-constraint
//! violation surfacing as a 500 tells the loser of the race that its payment failed when it did
//! not. The same key with a different body must be refused (`422`; any 2xx fails). A request
//! missing a required key must be refused (`400`; any non-4xx fails), configured with
//! `require_key_paths`.
//!
//! Two grades: a *violation* fails the check; a *weakness* — a 409 without Retry-After, the same
//! resource returned without `Idempotent-Replayed: true`, a creation answered 200, a mismatch
//! refused with a 4xx other than 422, a missing key refused with one other than 400 — makes it
//! `weak`: the property holds, the client is told less than it should be. Retry-After is judged
//! only where the observer recorded response headers ([`history::Entry::response_headers`]).
//!
//! The same check judges the fault server's journal and `harness idempotency`'s own record of its
//! exchanges (the client's side: what it sent, what came back).
//!
//! Responses injected by the fault schedule (`fault` of `status`, `hang`, `reset`, `malformed`)
//! say nothing about the implementation and are not judged, but what such a request created still
//! counts; `drop` and `delay` responses are judged like any other (a dropped request was
//! processed).
//!
//! Evidence: the protocol is exercised only when a key comes back (a retry, a race, a replay, a
//! mismatch) or a required key is missing; keys that were each sent once leave it inconclusive.
//!
//! Metrics: `keys`, `repeated_keys`, `creations`, `replays`, `conflicts_409`, `mismatches`, `missing_key_requests`,
//! `violations`, `weaknesses`, and one count per kind of finding (`several_creations`,
//! `race_5xx`, `race_no_response`, `conflict_after_completion`, `replay_failed`,
//! `replay_wrong_status`, `replay_not_flagged`, `mismatch_accepted`, `mismatch_not_422`,
//! `missing_key_accepted`, `missing_key_not_400`, `conflict_without_retry_after`,
//! `replay_unflagged`, `created_not_201`).

use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::idle::{hash_key, IdleMap};
use super::spec::{About, CheckSpec};
use super::{Attempt, Check, Context};
use history::{Entry, Facts, Outcome};

/// Configuration of the `idempotency_semantics` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The status the implementation chose; `None` when no response came or the schedule chose
    /// it.
    status: Option<u16>,
    /// No response reached the client, and no fault of the schedule is to blame.
    unanswered: bool,
    replayed: bool,
    created: Option<String>,
    /// The resource the response named (the observer's reading of its body or `Location`).
    resource: Option<String>,
    /// Whether a Retry-After came with the response; `None` when headers were not recorded.
    retry_after: Option<bool>,
    /// Hash of the body's SHA-256 (only compared, never shown).
    body: Option<u64>,
}

/// True when the schedule, not the implementation, chose the response.
fn injected(e: &Entry) -> bool {
    e.fault
        .as_deref()
        .is_some_and(|f| f != "delay" && f != "drop")
}

/// What a finding is about; each kind is counted in a metric of its own name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// More than one resource, or more than one fresh 201, for one key.
    SeveralCreations,
    /// A request racing another with the same key got a 5xx.
    Race5xx,
    /// A request racing another with the same key got no response.
    RaceNoResponse,
    /// A 409 after the first request had completed.
    ConflictAfterCompletion,
    /// A retry of a completed request failed, was refused or got no response.
    ReplayFailed,
    /// A replay with a status the contract does not allow.
    ReplayWrongStatus,
    /// A retry after completion answered 2xx without being flagged as a replay, naming another
    /// resource or none.
    ReplayNotFlagged,
    /// The same key with a different body was accepted.
    MismatchAccepted,
    /// The same key with a different body was refused, but not with 422.
    MismatchNot422,
    /// A request without a required key was not refused.
    MissingKeyAccepted,
    /// A request without a required key was refused, but not with 400.
    MissingKeyNot400,
    /// A 409 without Retry-After: the client cannot tell when to come back.
    ConflictWithoutRetryAfter,
    /// The same resource returned again without `Idempotent-Replayed: true`.
    ReplayUnflagged,
    /// A creation answered with a 2xx other than 201: a client cannot tell it from a replay.
    CreatedNot201,
}

impl Kind {
    const ALL: [Kind; 14] = [
        Kind::SeveralCreations,
        Kind::Race5xx,
        Kind::RaceNoResponse,
        Kind::ConflictAfterCompletion,
        Kind::ReplayFailed,
        Kind::ReplayWrongStatus,
        Kind::ReplayNotFlagged,
        Kind::MismatchAccepted,
        Kind::MismatchNot422,
        Kind::MissingKeyAccepted,
        Kind::MissingKeyNot400,
        Kind::ConflictWithoutRetryAfter,
        Kind::ReplayUnflagged,
        Kind::CreatedNot201,
    ];

    /// The metric that counts this kind.
    fn metric(self) -> &'static str {
        match self {
            Kind::SeveralCreations => "several_creations",
            Kind::Race5xx => "race_5xx",
            Kind::RaceNoResponse => "race_no_response",
            Kind::ConflictAfterCompletion => "conflict_after_completion",
            Kind::ReplayFailed => "replay_failed",
            Kind::ReplayWrongStatus => "replay_wrong_status",
            Kind::ReplayNotFlagged => "replay_not_flagged",
            Kind::MismatchAccepted => "mismatch_accepted",
            Kind::MismatchNot422 => "mismatch_not_422",
            Kind::MissingKeyAccepted => "missing_key_accepted",
            Kind::MissingKeyNot400 => "missing_key_not_400",
            Kind::ConflictWithoutRetryAfter => "conflict_without_retry_after",
            Kind::ReplayUnflagged => "replay_unflagged",
            Kind::CreatedNot201 => "created_not_201",
        }
    }

    /// A violation fails the check; the others weaken it (the property holds, the client is
    /// told less than it should be).
    fn violates(self) -> bool {
        !matches!(
            self,
            Kind::MismatchNot422
                | Kind::MissingKeyNot400
                | Kind::ConflictWithoutRetryAfter
                | Kind::ReplayUnflagged
                | Kind::CreatedNot201
        )
    }
}

/// The `idempotency_semantics` check.
pub(crate) struct IdempotencySemanticsCheck {
    cfg: IdempotencySemanticsConfig,
    keys: IdleMap<String, Vec<Req>>,
    now_us: u64,
    violations: Findings,
    weaknesses: Findings,
    counts: [u64; Kind::ALL.len()],
    n_keys: u64,
    /// Keys sent more than once: a retry, a race, a replay or a mismatch.
    repeated_keys: u64,
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
            violations: Findings::new(ctx.max_evidence),
            weaknesses: Findings::new(ctx.max_evidence),
            counts: [0; Kind::ALL.len()],
            n_keys: 0,
            repeated_keys: 0,
            creations: 0,
            replays: 0,
            conflicts: 0,
            mismatches: 0,
            missing_key: 0,
        }
    }

    fn find(&mut self, kind: Kind, detail: String, key: Option<&str>, seqs: Vec<u64>) {
        if let Some(i) = Kind::ALL.iter().position(|k| *k == kind) {
            self.counts[i] += 1;
        }
        let list = if kind.violates() {
            &mut self.violations
        } else {
            &mut self.weaknesses
        };
        list.push(detail, key.map(str::to_string), seqs);
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
        let what = format!("{} {} without an Idempotency-Key", e.method, e.path);
        if !(400..500).contains(&status) {
            self.find(
                Kind::MissingKeyAccepted,
                format!("{what} was answered {status}, expected 400: a retry of it cannot be deduplicated"),
                None,
                vec![e.seq],
            );
        } else if status != 400 {
            self.find(
                Kind::MissingKeyNot400,
                format!("{what} was refused with {status}; the draft answers 400"),
                None,
                vec![e.seq],
            );
        }
    }

    fn judge(&mut self, key: String, reqs: Vec<Req>) {
        self.n_keys += 1;
        if reqs.len() > 1 {
            self.repeated_keys += 1;
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
            let seqs = ids.iter().map(|(_, s)| *s).collect();
            self.find(
                Kind::SeveralCreations,
                format!(
                    "key {key}: {} resources created ({}), expected exactly one",
                    ids.len(),
                    names.join(", ")
                ),
                Some(&key),
                seqs,
            );
        }
        let fresh_201: Vec<u64> = reqs
            .iter()
            .filter(|r| r.status == Some(201) && !r.replayed)
            .map(|r| r.seq)
            .collect();
        if fresh_201.len() > 1 && ids.len() <= 1 {
            self.find(
                Kind::SeveralCreations,
                format!(
                    "key {key}: {} requests answered 201, expected exactly one",
                    fresh_201.len()
                ),
                Some(&key),
                fresh_201,
            );
        }
        let creator = reqs.iter().find(|r| r.created.is_some());
        if let Some(c) = creator {
            if let Some(s) = c.status.filter(|s| (200..300).contains(s) && *s != 201) {
                self.find(
                    Kind::CreatedNot201,
                    format!(
                        "key {key}: the creation was answered {s}, not 201, so a client cannot \
                         tell it from a replay"
                    ),
                    Some(&key),
                    vec![c.seq],
                );
            }
        }
        let created_id = creator.and_then(|c| c.created.as_deref());
        let original_body = creator.or(reqs.first()).and_then(|r| r.body);
        let mut findings: Vec<(Kind, String, u64)> = Vec::new();
        for r in &reqs {
            if creator.is_some_and(|c| c.seq == r.seq) {
                continue;
            }
            let raced = reqs
                .iter()
                .any(|o| o.seq != r.seq && o.t_recv_us < r.t_done_us && r.t_recv_us < o.t_done_us);
            let after = creator.is_some_and(|c| r.t_recv_us >= c.t_done_us);
            if r.body.is_some() && original_body.is_some() && r.body != original_body {
                if r.status.is_none() && !r.unanswered {
                    continue;
                }
                self.mismatches += 1;
                match r.status {
                    Some(422) => {}
                    Some(s) if (400..500).contains(&s) => findings.push((
                        Kind::MismatchNot422,
                        format!("reused with a different body and refused with {s}; the draft and Stripe answer 422"),
                        r.seq,
                    )),
                    Some(s) if (200..300).contains(&s) => findings.push((
                        Kind::MismatchAccepted,
                        format!("reused with a different body and answered {s}, expected 422: a reused key silently returns or creates the wrong thing"),
                        r.seq,
                    )),
                    Some(s) => findings.push((
                        Kind::MismatchAccepted,
                        format!("reused with a different body and answered {s} instead of refusing with 422"),
                        r.seq,
                    )),
                    None => findings.push((
                        Kind::MismatchAccepted,
                        "reused with a different body and got no response instead of a 422".to_string(),
                        r.seq,
                    )),
                }
                continue;
            }
            let Some(status) = r.status else {
                if !r.unanswered {
                    continue;
                }
                if after {
                    findings.push((
                        Kind::ReplayFailed,
                        "a retry of the completed request got no response".to_string(),
                        r.seq,
                    ));
                } else if raced {
                    findings.push((
                        Kind::RaceNoResponse,
                        "a request racing another with the same key got no response; the \
                         loser of a race must get 409 or the stored result"
                            .to_string(),
                        r.seq,
                    ));
                }
                continue;
            };
            if status >= 500 {
                if after {
                    findings.push((
                        Kind::ReplayFailed,
                        format!("a retry of the completed request got {status}: it fails"),
                        r.seq,
                    ));
                } else if raced {
                    findings.push((
                        Kind::Race5xx,
                        format!(
                            "a request racing another with the same key got {status}; the \
                             loser of a race must get 409 or the stored result"
                        ),
                        r.seq,
                    ));
                }
                continue;
            }
            if status == 409 {
                if after {
                    findings.push((
                        Kind::ConflictAfterCompletion,
                        "answered 409 after the first request had completed; expected a 200 \
                         replay of the stored result"
                            .to_string(),
                        r.seq,
                    ));
                } else {
                    self.conflicts += 1;
                    if r.retry_after == Some(false) {
                        findings.push((
                            Kind::ConflictWithoutRetryAfter,
                            "answered 409 without Retry-After: the client cannot tell when to \
                             come back"
                                .to_string(),
                            r.seq,
                        ));
                    }
                }
                continue;
            }
            if !(200..300).contains(&status) {
                if after {
                    findings.push((
                        Kind::ReplayFailed,
                        format!("a retry of the completed request was refused with {status}"),
                        r.seq,
                    ));
                }
                continue;
            }
            if r.replayed {
                if self.cfg.replay_statuses.contains(&status) {
                    self.replays += 1;
                } else {
                    findings.push((
                        Kind::ReplayWrongStatus,
                        format!(
                            "replay answered {status}, expected {:?}",
                            self.cfg.replay_statuses
                        ),
                        r.seq,
                    ));
                }
                continue;
            }
            let named = r.created.as_deref().or(r.resource.as_deref());
            match (named, created_id) {
                // A second creation is `several_creations`'s finding, above.
                (Some(a), Some(b)) if a != b => {}
                (Some(_), Some(_)) if status != 201 => findings.push((
                    Kind::ReplayUnflagged,
                    format!(
                        "answered {status} with the same resource but without \
                         Idempotent-Replayed: true"
                    ),
                    r.seq,
                )),
                (None, _) if after => findings.push((
                    Kind::ReplayNotFlagged,
                    format!(
                        "a retry after completion answered {status} without \
                         Idempotent-Replayed; expected a 200 replay"
                    ),
                    r.seq,
                )),
                _ => {}
            }
        }
        for (kind, detail, seq) in findings {
            self.find(kind, format!("key {key}: {detail}"), Some(&key), vec![seq]);
        }
    }
}

impl Check for IdempotencySemanticsCheck {
    fn name(&self) -> &'static str {
        "idempotency_semantics"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        // The draft's protocol is HTTP's (201, replays, 409, 422); a gRPC call answers in its
        // own status codes, which `duplicates` and the gRPC checks judge.
        if e.is_grpc() {
            return;
        }
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
        let injected = injected(e);
        self.keys
            .touch(key, e.t_recv_us.max(e.t_done_us), Vec::new)
            .push(Req {
                seq: e.seq,
                t_recv_us: e.t_recv_us,
                t_done_us: e.t_done_us,
                // The schedule's answer says nothing about the implementation; what the request
                // created still counts.
                status: if injected { None } else { e.status },
                unanswered: e.status.is_none()
                    && e.fault.is_none()
                    && matches!(e.outcome, Outcome::Reset | Outcome::Dropped | Outcome::Hung),
                replayed: e.replayed,
                created: e.created.clone(),
                resource: e.resource.clone(),
                retry_after: e
                    .response_headers
                    .as_ref()
                    .map(|h| h.contains_key("retry-after")),
                body: e.body_sha256.as_deref().map(hash_key),
            });
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        let keys = std::mem::replace(&mut self.keys, IdleMap::new(0));
        for (k, v) in keys.drain() {
            self.judge(k, v);
        }
        let n = |count: u64, one: &str, many: &str| {
            format!("{count} {}", if count == 1 { one } else { many })
        };
        let tally = format!(
            "{}: {} created once, {}, {} (409), {}, {}",
            n(self.n_keys, "key", "keys"),
            self.creations,
            n(self.replays, "replay", "replays"),
            n(self.conflicts, "conflict", "conflicts"),
            n(self.mismatches, "body mismatch", "body mismatches"),
            n(self.missing_key, "missing key", "missing keys"),
        );
        let (verdict, summary) = if let Some(first) = self.violations.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} idempotency violations; first: {first}",
                    self.violations.total()
                ),
            )
        } else if let Some(first) = self.weaknesses.first_detail() {
            (
                Verdict::Weak,
                format!(
                    "no violation, but {} answers tell the client less than they should; first: \
                     {first}",
                    self.weaknesses.total()
                ),
            )
        } else if self.n_keys == 0 && self.missing_key == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no request carried an idempotency key".to_string(),
            )
        } else if self.repeated_keys == 0 && self.missing_key == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: each of the {} keys was sent once, so nothing asked the \
                     server to replay, refuse or resolve a race ({tally})",
                    self.n_keys
                ),
            )
        } else {
            (Verdict::Pass, tally)
        };
        let mut result = CheckResult::new("idempotency_semantics", verdict, summary)
            .metric("keys", self.n_keys)
            .metric("repeated_keys", self.repeated_keys)
            .metric("creations", self.creations)
            .metric("replays", self.replays)
            .metric("conflicts_409", self.conflicts)
            .metric("mismatches", self.mismatches)
            .metric("missing_key_requests", self.missing_key)
            .metric("violations", self.violations.total())
            .metric("weaknesses", self.weaknesses.total());
        for (kind, n) in Kind::ALL.iter().zip(self.counts) {
            result = result.metric(kind.metric(), n);
        }
        let result = attach(result, self.violations);
        attach(result, self.weaknesses)
    }
}

impl CheckSpec for IdempotencySemanticsConfig {
    const NAME: &'static str = "idempotency_semantics";
    const ABOUT: About = About {
        catches: "a protocol that lies to the client",
        how: "per key: exactly one 201; replays `200` (`replayed`); races answered 409 or replay, never 5xx or silence; a retry after completion replayed; a different body with the same key refused (422; 2xx fails); a missing key refused (400) where `require_key_paths` says it is required; a 409 without Retry-After or an unflagged replay is weak",
        evidence: "a key was sent more than once (a retry, a race, a replay or a mismatch), or a request lacked a required key",
        limits: "409's Retry-After is judged where response headers were recorded (`harness idempotency` records them); responses replaced by a fault are skipped; HTTP only (gRPC calls are left to `duplicates` and the gRPC checks)",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(IdempotencySemanticsCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Outcome;
    use verdict::Verdict;

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

    /// Keys that were each sent once and created once: the server was never asked to replay,
    /// refuse or resolve a race, so its answers prove nothing about the protocol.
    #[test]
    fn keys_sent_once_are_no_evidence() {
        let j: Vec<history::Entry> = (1..=10)
            .map(|i| {
                entry(i, i as u32)
                    .key(&format!("k{i}"))
                    .body("b")
                    .created(&format!("o{i}"))
                    .build()
            })
            .collect();
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(r.summary.contains("was sent once"), "{}", r.summary);
        assert_eq!(r.metrics["repeated_keys"], 0);
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

    /// A burst as `harness idempotency` records it from the client's side: one 201 naming o1,
    /// then `losers`, all released together; response headers recorded.
    fn client_side(losers: Vec<history::sample::EntryBuilder>) -> Vec<history::Entry> {
        let mut j = vec![entry(1, 0)
            .key("k")
            .body("b")
            .took(20)
            .created("o1")
            .resource("o1")
            .response_header("location", "/orders/o1")
            .build()];
        for (i, l) in losers.into_iter().enumerate() {
            j.push(l.key("k").body("b").took(10).build());
            j.last_mut().expect("pushed").seq = i as u64 + 2;
        }
        j
    }

    fn conflict(t: u32, retry_after: bool) -> history::sample::EntryBuilder {
        let e = entry(0, t).status(409).recorded_headers();
        if retry_after {
            e.response_header("retry-after", "1")
        } else {
            e
        }
    }

    #[test]
    fn a_409_without_retry_after_is_weak_where_headers_were_recorded() {
        let j = client_side(vec![conflict(1, true), conflict(2, false)]);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert!(r.passed(), "weak does not fail the run");
        assert_eq!(r.metrics["conflict_without_retry_after"], 1);
        assert!(r.summary.contains("Retry-After"), "{}", r.summary);
        // A journal that records no response headers cannot tell: no finding.
        let j = client_side(vec![entry(0, 1).status(409)]);
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Pass);
    }

    #[test]
    fn the_answer_to_a_different_body_is_graded() {
        for (status, verdict) in [
            (422, Verdict::Pass),
            (400, Verdict::Weak),
            (200, Verdict::Fail),
            (500, Verdict::Fail),
        ] {
            let mut j = client_side(vec![conflict(1, true)]);
            j.push(entry(3, 100).key("k").body("other").status(status).build());
            let r = run_one(NAME, "{}", &j);
            assert_eq!(r.verdict, verdict, "{status}: {}", r.summary);
        }
    }

    #[test]
    fn a_missing_key_refused_with_another_4xx_is_weak() {
        let cfg = "{ require_key_paths: [/orders] }";
        let j = [entry(1, 0).status(403).build()];
        let r = run_one(NAME, cfg, &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert_eq!(r.metrics["missing_key_not_400"], 1);
    }

    #[test]
    fn the_same_resource_without_the_replay_flag_is_weak_another_one_fails() {
        let same = client_side(vec![entry(0, 50).status(200).resource("o1")]);
        let r = run_one(NAME, "{}", &same);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert_eq!(r.metrics["replay_unflagged"], 1);
        // A 200 that names another order: the retry created again.
        let other = client_side(vec![entry(0, 50).status(200).created("o2").resource("o2")]);
        let r = run_one(NAME, "{}", &other);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["several_creations"], 1);
    }

    #[test]
    fn losers_left_without_an_answer_and_failed_replays_fail() {
        let j = client_side(vec![
            entry(0, 1).no_response(Outcome::Reset),
            entry(0, 2).no_response(Outcome::Hung),
            entry(0, 100).status(500),
        ]);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["race_no_response"], 2);
        assert_eq!(r.metrics["replay_failed"], 1);
        // A client that gave up is not the server's fault.
        let j = client_side(vec![entry(0, 1).no_response(Outcome::ClientClosed)]);
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Pass);
    }

    #[test]
    fn a_creation_answered_200_is_weak() {
        let j = [
            entry(1, 0)
                .key("k")
                .body("b")
                .created("o1")
                .status(200)
                .build(),
            entry(2, 50).key("k").body("b").replayed().build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert_eq!(r.metrics["created_not_201"], 1);
    }
}
