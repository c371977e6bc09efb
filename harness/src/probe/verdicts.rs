//! The probe's verdicts: pure functions of the recorded rounds and follow-ups.
//!
//! `duplicates` asks the question that costs money — did one key create more than one resource?
//! `idempotency_semantics` asks whether a client can rely on the answers: a race's losers must get
//! something a client can act on (the same resource, or "in progress, retry after N s"), never a
//! 5xx that a retrying client would treat as "try again, maybe with a new key".

use std::collections::BTreeMap;

use reports::{CheckResult, Evidence, Verdict};

use super::{Exchange, FollowUps, RoundResult};

/// At most this many per-key evidence items per finding, so a 1000-round probe stays readable.
const EVIDENCE_PER_FINDING: usize = 5;

/// The probe's checks, `duplicates` then `idempotency_semantics`, from what it recorded.
pub fn judge(
    rounds: &[RoundResult],
    follow_ups: &FollowUps,
    require_key: bool,
) -> Vec<CheckResult> {
    vec![
        duplicates(rounds),
        semantics(rounds, follow_ups, require_key),
    ]
}

fn duplicates(rounds: &[RoundResult]) -> CheckResult {
    let mut bad: Vec<&RoundResult> = rounds.iter().filter(|r| r.has_duplicates()).collect();
    bad.sort_by_key(|r| std::cmp::Reverse(r.resources_created()));
    let max_created = rounds
        .iter()
        .map(RoundResult::resources_created)
        .max()
        .unwrap_or(0);
    let anything_created = rounds.iter().any(|r| r.resources_created() > 0);
    let verify_failed: Vec<&RoundResult> =
        rounds.iter().filter(|r| r.verify_error.is_some()).collect();
    // A verify URL that counts nothing while the endpoint answered 201 is probably the wrong URL,
    // and then its silence proves nothing.
    let verify_blind: Vec<&RoundResult> = rounds
        .iter()
        .filter(|r| r.verify_count == Some(0) && r.created() > 0)
        .collect();

    let (verdict, summary) = if !bad.is_empty() {
        (
            Verdict::Fail,
            format!(
                "{} of {} rounds created more than one resource for one key (up to {max_created}): \
                 a retried request creates again",
                bad.len(),
                rounds.len()
            ),
        )
    } else if !anything_created {
        (
            Verdict::Inconclusive,
            "no request succeeded, so there was nothing to duplicate".to_string(),
        )
    } else if !verify_failed.is_empty() || !verify_blind.is_empty() {
        (
            Verdict::Weak,
            "no key created more than one resource in the responses, but the verify lookup did \
             not confirm it"
                .to_string(),
        )
    } else {
        (
            Verdict::Pass,
            format!(
                "every key created exactly one resource across {} concurrent bursts",
                rounds.len()
            ),
        )
    };

    let mut c = CheckResult::new("duplicates", verdict, summary)
        .metric("rounds", rounds.len() as u64)
        .metric("rounds_with_duplicates", bad.len() as u64)
        .metric("max_created_per_key", max_created)
        .metric(
            "release_skew_us_max",
            rounds.iter().map(|r| r.release_skew_us).max().unwrap_or(0),
        )
        .metric(
            "verified_rounds",
            rounds.iter().filter(|r| r.verify_count.is_some()).count() as u64,
        );
    for r in &bad {
        let verify = r
            .verify_count
            .map(|n| format!(", the verify lookup counts {n}"))
            .unwrap_or_default();
        c = c.evidence(Evidence {
            detail: format!(
                "key {} (round {}): {} resources — {} × 201, {} distinct ids in 2xx responses{verify}",
                r.key,
                r.round,
                r.resources_created(),
                r.created(),
                r.resources().len(),
            ),
            key: Some(r.key.clone()),
            seqs: vec![],
        });
    }
    for r in verify_failed.iter().take(EVIDENCE_PER_FINDING) {
        c = c.evidence(Evidence {
            detail: format!(
                "verify lookup for round {} failed: {}",
                r.round,
                r.verify_error.as_deref().unwrap_or_default()
            ),
            key: Some(r.key.clone()),
            seqs: vec![],
        });
    }
    for r in verify_blind.iter().take(EVIDENCE_PER_FINDING) {
        c = c.evidence(Evidence {
            detail: format!(
                "round {} got a 201 but the verify lookup counts 0 resources: check the verify URL",
                r.round
            ),
            key: Some(r.key.clone()),
            seqs: vec![],
        });
    }
    c
}

/// One property of `idempotency_semantics`, with its own verdict.
struct Finding {
    name: &'static str,
    verdict: Verdict,
    headline: String,
    /// The key the whole finding is about, when it is about one.
    key: Option<String>,
    evidence: Vec<Evidence>,
    metrics: Vec<(&'static str, serde_json::Value)>,
}

impl Finding {
    fn new(name: &'static str, verdict: Verdict, headline: impl Into<String>) -> Finding {
        Finding {
            name,
            verdict,
            headline: headline.into(),
            key: None,
            evidence: Vec::new(),
            metrics: Vec::new(),
        }
    }
}

fn semantics(rounds: &[RoundResult], f: &FollowUps, require_key: bool) -> CheckResult {
    let mut findings = vec![
        one_created(rounds),
        losers(rounds),
        replay(rounds.first(), &f.replay),
        different_body(rounds.first(), &f.different_body),
        missing_key(&f.missing_key, require_key),
    ];
    // Most telling first: failures, then weaknesses.
    findings.sort_by_key(|x| std::cmp::Reverse(severity(x.verdict)));
    let verdict = findings
        .first()
        .map_or(Verdict::Inconclusive, |x| x.verdict);
    let summary = if verdict == Verdict::Pass {
        "one 201 per key; the others replayed it or got 409 + Retry-After; a replay returns the \
         same resource; a different body is refused with 422; a missing key is answered correctly"
            .to_string()
    } else {
        findings
            .iter()
            .filter(|x| x.verdict != Verdict::Pass)
            .map(|x| format!("{}: {}", x.name, x.headline))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut c = CheckResult::new("idempotency_semantics", verdict, summary);
    for x in &findings {
        c = c.metric(x.name, verdict_name(x.verdict));
        for (k, v) in &x.metrics {
            c = c.metric(k, v.clone());
        }
    }
    for x in findings {
        c = c.evidence(Evidence {
            detail: format!("{} [{}]: {}", x.name, verdict_name(x.verdict), x.headline),
            key: x.key,
            seqs: vec![],
        });
        for e in x.evidence {
            c = c.evidence(e);
        }
    }
    c
}

/// Exactly one `201` per round.
fn one_created(rounds: &[RoundResult]) -> Finding {
    let several: Vec<&RoundResult> = rounds.iter().filter(|r| r.created() > 1).collect();
    let nothing: Vec<&RoundResult> = rounds
        .iter()
        .filter(|r| !r.responses.iter().any(Exchange::is_success))
        .collect();
    let not_201: Vec<&RoundResult> = rounds
        .iter()
        .filter(|r| r.created() == 0 && r.responses.iter().any(Exchange::is_success))
        .collect();
    let mut x = if !several.is_empty() || !nothing.is_empty() {
        let mut parts = Vec::new();
        if !several.is_empty() {
            parts.push(format!("{} rounds got several 201s", several.len()));
        }
        if !nothing.is_empty() {
            parts.push(format!("{} rounds got no 2xx at all", nothing.len()));
        }
        Finding::new("one_created", Verdict::Fail, parts.join(", "))
    } else if !not_201.is_empty() {
        Finding::new(
            "one_created",
            Verdict::Weak,
            format!(
                "{} rounds created with a 2xx other than 201, so a client cannot tell a creation \
                 from a replay",
                not_201.len()
            ),
        )
    } else {
        Finding::new(
            "one_created",
            Verdict::Pass,
            "every round got exactly one 201",
        )
    };
    for r in several.iter().take(EVIDENCE_PER_FINDING) {
        x.evidence.push(keyed(r, format!("{} × 201", r.created())));
    }
    for r in nothing.iter().take(EVIDENCE_PER_FINDING) {
        x.evidence
            .push(keyed(r, format!("no 2xx: {}", histogram(&r.responses))));
    }
    for r in not_201.iter().take(EVIDENCE_PER_FINDING) {
        x.evidence
            .push(keyed(r, format!("no 201: {}", histogram(&r.responses))));
    }
    x.metrics = vec![
        (
            "rounds_with_one_201",
            rounds.iter().filter(|r| r.created() == 1).count().into(),
        ),
        ("rounds_with_several_201", several.len().into()),
        ("rounds_without_2xx", nothing.len().into()),
    ];
    x
}

/// How each loser of a race was answered.
#[derive(Default)]
struct LoserCounts {
    replayed: u64,
    replayed_unflagged: u64,
    other_resource: u64,
    in_progress: u64,
    in_progress_without_retry_after: u64,
    server_error: u64,
    no_response: u64,
    other: u64,
}

/// The requests that did not create: a replay of the same resource, or `409` + `Retry-After`.
fn losers(rounds: &[RoundResult]) -> Finding {
    let mut total = LoserCounts::default();
    let mut total_losers = 0;
    let mut fail_ev = Vec::new();
    let mut weak_ev = Vec::new();
    for r in rounds {
        let reference = r.reference();
        let reference_id = reference.and_then(|i| r.responses.get(i)?.resource());
        let mut n = LoserCounts::default();
        for (i, e) in r.responses.iter().enumerate() {
            // The winner, and extra 201s (those are `one_created`'s and `duplicates`' business).
            if Some(i) == reference || e.status == Some(201) {
                continue;
            }
            match e.status {
                None => n.no_response += 1,
                Some(_) if e.is_server_error() => n.server_error += 1,
                Some(409) if e.retry_after.is_some() => n.in_progress += 1,
                Some(409) => n.in_progress_without_retry_after += 1,
                Some(_) if e.is_success() => match (reference_id, e.resource()) {
                    (Some(a), Some(b)) if a != b => n.other_resource += 1,
                    _ if e.replayed => n.replayed += 1,
                    _ => n.replayed_unflagged += 1,
                },
                Some(_) => n.other += 1,
            }
        }
        let losers = r
            .responses
            .iter()
            .enumerate()
            .filter(|(i, e)| Some(*i) != reference && e.status != Some(201))
            .count();
        total_losers += losers;
        let mut fails = Vec::new();
        if n.server_error > 0 {
            fails.push(format!("{} got a 5xx", n.server_error));
        }
        if n.no_response > 0 {
            fails.push(format!("{} got no response", n.no_response));
        }
        if n.other_resource > 0 {
            fails.push(format!("{} got a different resource", n.other_resource));
        }
        if !fails.is_empty() {
            fail_ev.push(keyed(
                r,
                format!(
                    "{losers} losers: {}; statuses {}",
                    fails.join(", "),
                    histogram(&r.responses)
                ),
            ));
        }
        let mut weak = Vec::new();
        if n.in_progress_without_retry_after > 0 {
            weak.push(format!(
                "{} × 409 without Retry-After",
                n.in_progress_without_retry_after
            ));
        }
        if n.replayed_unflagged > 0 {
            weak.push(format!(
                "{} replays without Idempotent-Replayed: true",
                n.replayed_unflagged
            ));
        }
        if n.other > 0 {
            weak.push(format!("{} other answers", n.other));
        }
        if !weak.is_empty() {
            weak_ev.push(keyed(
                r,
                format!(
                    "{losers} losers: {}; statuses {}",
                    weak.join(", "),
                    histogram(&r.responses)
                ),
            ));
        }
        total.replayed += n.replayed;
        total.replayed_unflagged += n.replayed_unflagged;
        total.other_resource += n.other_resource;
        total.in_progress += n.in_progress;
        total.in_progress_without_retry_after += n.in_progress_without_retry_after;
        total.server_error += n.server_error;
        total.no_response += n.no_response;
        total.other += n.other;
    }
    let t = &total;
    let mut x = if t.server_error + t.no_response + t.other_resource > 0 {
        let mut parts = Vec::new();
        if t.server_error > 0 {
            parts.push(format!(
                "{} losers of a race got a 5xx (a client retries it, maybe with a new key)",
                t.server_error
            ));
        }
        if t.no_response > 0 {
            parts.push(format!("{} losers got no response", t.no_response));
        }
        if t.other_resource > 0 {
            parts.push(format!(
                "{} losers were answered with another resource",
                t.other_resource
            ));
        }
        Finding::new("losers", Verdict::Fail, parts.join(", "))
    } else if t.in_progress_without_retry_after + t.replayed_unflagged + t.other > 0 {
        let mut parts = Vec::new();
        if t.in_progress_without_retry_after > 0 {
            parts.push(format!(
                "{} × 409 without Retry-After (a client cannot tell when to retry)",
                t.in_progress_without_retry_after
            ));
        }
        if t.replayed_unflagged > 0 {
            parts.push(format!(
                "{} replays without Idempotent-Replayed: true",
                t.replayed_unflagged
            ));
        }
        if t.other > 0 {
            parts.push(format!("{} losers got neither a replay nor a 409", t.other));
        }
        Finding::new("losers", Verdict::Weak, parts.join(", "))
    } else if total_losers == 0 {
        Finding::new(
            "losers",
            Verdict::Inconclusive,
            "no request lost a race (every one created, or each burst had one request)",
        )
    } else {
        Finding::new(
            "losers",
            Verdict::Pass,
            format!(
                "{} replays of the same resource, {} × 409 with Retry-After",
                t.replayed, t.in_progress
            ),
        )
    };
    x.evidence = fail_ev
        .into_iter()
        .take(EVIDENCE_PER_FINDING)
        .chain(weak_ev.into_iter().take(EVIDENCE_PER_FINDING))
        .collect();
    x.metrics = vec![
        ("losers_replayed", t.replayed.into()),
        ("losers_replayed_unflagged", t.replayed_unflagged.into()),
        ("losers_other_resource", t.other_resource.into()),
        ("losers_409", t.in_progress.into()),
        (
            "losers_409_without_retry_after",
            t.in_progress_without_retry_after.into(),
        ),
        ("losers_5xx", t.server_error.into()),
        ("losers_no_response", t.no_response.into()),
        ("losers_other", t.other.into()),
    ];
    x
}

/// Round 1's key and body again, after everything completed: the stored result.
fn replay(first: Option<&RoundResult>, e: &Exchange) -> Finding {
    let resources = first.map(RoundResult::resources).unwrap_or_default();
    let created_anything = first.is_some_and(|r| r.responses.iter().any(Exchange::is_success));
    let status = e.describe();
    let mut x = if !created_anything {
        Finding::new(
            "replay",
            Verdict::Inconclusive,
            format!("round 1 created nothing to replay (replay answered {status})"),
        )
    } else if !e.is_success() {
        let why = match e.status {
            Some(409) => "the completed request is still reported in progress",
            Some(s) if s >= 500 => "a retry of a completed request fails",
            Some(_) => "a retry of a completed request is refused",
            None => "a retry of a completed request gets no answer",
        };
        Finding::new("replay", Verdict::Fail, format!("answered {status}: {why}"))
    } else {
        match e.resource() {
            Some(b) if !resources.is_empty() && !resources.contains(&b) => Finding::new(
                "replay",
                Verdict::Fail,
                format!(
                    "answered {status} with resource {b}, which round 1 never returned: the \
                     retry created again"
                ),
            ),
            // Round 1 already created several; the replay picked one of them.
            Some(_) if resources.len() > 1 => Finding::new(
                "replay",
                Verdict::Weak,
                format!(
                    "answered {status} with one of the {} resources round 1 created",
                    resources.len()
                ),
            ),
            Some(_) if resources.is_empty() => Finding::new(
                "replay",
                Verdict::Weak,
                format!(
                    "answered {status}, but round 1's answers had no id or Location to compare"
                ),
            ),
            Some(_) if e.replayed => Finding::new(
                "replay",
                Verdict::Pass,
                format!("answered {status} with the same resource, Idempotent-Replayed: true"),
            ),
            Some(_) => Finding::new(
                "replay",
                Verdict::Weak,
                format!(
                    "answered {status} with the same resource but no Idempotent-Replayed: true"
                ),
            ),
            None => Finding::new(
                "replay",
                Verdict::Weak,
                format!("answered {status}, but without an id or Location to compare"),
            ),
        }
    };
    x.key = first.map(|r| r.key.clone());
    x.metrics = vec![("replay_status", status_value(e))];
    x
}

/// Round 1's key with a different body: the key is being reused by mistake, refuse it (`422`).
fn different_body(first: Option<&RoundResult>, e: &Exchange) -> Finding {
    let status = e.describe();
    let (verdict, headline) = match e.status {
        Some(422) => (Verdict::Pass, "refused with 422".to_string()),
        Some(_) if e.is_success() => (
            Verdict::Fail,
            format!(
                "accepted with {status}: a reused key silently returns or creates the wrong thing"
            ),
        ),
        Some(s) if (400..500).contains(&s) => (
            Verdict::Weak,
            format!("refused with {status}; the draft and Stripe answer 422"),
        ),
        _ => (
            Verdict::Fail,
            format!("answered {status} instead of refusing with 422"),
        ),
    };
    let mut x = Finding::new("different_body", verdict, headline);
    x.key = first.map(|r| r.key.clone());
    x.metrics = vec![("different_body_status", status_value(e))];
    x
}

/// No key: `400` when the endpoint requires one, else a plain creation.
fn missing_key(e: &Exchange, require_key: bool) -> Finding {
    let status = e.describe();
    let (verdict, headline) = match (require_key, e.status) {
        (true, Some(400)) => (Verdict::Pass, "refused with 400".to_string()),
        (true, Some(_)) if e.is_success() => (
            Verdict::Fail,
            format!("accepted without a key ({status}): a retry of it cannot be deduplicated"),
        ),
        (true, Some(s)) if (400..500).contains(&s) => (
            Verdict::Weak,
            format!("refused with {status}; the draft answers 400"),
        ),
        (false, Some(_)) if e.is_success() => {
            (Verdict::Pass, format!("accepted without a key ({status})"))
        }
        (false, Some(s)) if (400..500).contains(&s) => (
            Verdict::Weak,
            format!("refused with {status} although the key was declared optional"),
        ),
        _ => (Verdict::Fail, format!("answered {status}")),
    };
    let mut x = Finding::new("missing_key", verdict, headline);
    x.metrics = vec![("missing_key_status", status_value(e))];
    x
}

fn keyed(r: &RoundResult, detail: String) -> Evidence {
    Evidence {
        detail: format!("key {} (round {}): {detail}", r.key, r.round),
        key: Some(r.key.clone()),
        seqs: vec![],
    }
}

/// `201 × 1, 409 × 9`: the statuses of a round, for evidence a human reads.
fn histogram(responses: &[Exchange]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for e in responses {
        *counts.entry(e.describe()).or_insert(0) += 1;
    }
    counts
        .iter()
        .map(|(s, n)| format!("{s} × {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn status_value(e: &Exchange) -> serde_json::Value {
    e.status
        .map_or(serde_json::Value::Null, serde_json::Value::from)
}

fn severity(v: Verdict) -> u8 {
    match v {
        Verdict::Pass => 0,
        Verdict::Inconclusive => 1,
        Verdict::Weak => 2,
        Verdict::Fail => 3,
    }
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::Weak => "weak",
        Verdict::Inconclusive => "inconclusive",
    }
}
