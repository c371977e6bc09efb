//! A POST or PATCH that takes an idempotency key: `harness idempotency`'s probe on the request
//! the document described — same-key bursts, a replay, the same key with another valid body, no
//! key — judged by the `duplicates` and `idempotency_semantics` checks.
//!
//! The store's word is the document's own GET: every resource the answers of a key named is
//! looked up, and the count of those that exist is that key's count (`--verify` replaces it with
//! a lookup that counts by key). Without such a GET the checks judge the answers alone, and the
//! row says so.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use checks::duplicates::VerifyConfig;
use history::{KeyCount, StoreCounts};
use http::HeaderName;
use openapi::{Operation, Request};
use primitives::draw::{splitmix64, Fnv};
use reports::model::{AuditedOperation, OperationVerdict};
use reports::{CheckResult, Verdict};

use super::row::{evidence, inconclusive, verdict, COULD_NOT_BUILD};
use super::session::{named, Auditor, Prepared};
use crate::probe::record::Answer;
use crate::probe::{mismatch, Bodies, Exchanged, ProbeOutcome, ProbePlan};

/// Evidence lines a row keeps of its checks (all of them are in its `checks`).
const EVIDENCE_MAX: usize = 12;

pub(super) async fn probe(
    a: &mut Auditor<'_>,
    op: &Operation,
    prepared: Prepared,
    mut row: AuditedOperation,
) -> AuditedOperation {
    let Prepared { request, key } = prepared;
    let Some((key_name, how)) = key else {
        return inconclusive(row, "no key header to probe with".into());
    };
    let Ok(key_header) = HeaderName::from_bytes(key_name.as_bytes()) else {
        return inconclusive(row, format!("{key_name:?} is not a header name"));
    };
    let base_key = a.fresh_key();
    if let Err(why) = a
        .baseline(op, &mut row, &request, Some((&key_header, &base_key)))
        .await
    {
        return inconclusive(row, why);
    }

    let (bodies, body_note) = bodies(a, op, &request);
    let headers = match a.session.headers(&request, Some(&key_header)) {
        Ok(h) => h,
        Err(e) => return inconclusive(row, format!("{COULD_NOT_BUILD}: {e}")),
    };
    let uri = a.session.target.path(&request.target());
    let plan = ProbePlan {
        url: format!("{}{}", a.session.target.origin(), uri),
        target: a.session.target.clone(),
        path: uri.split('?').next().unwrap_or(&uri).to_string(),
        uri,
        method: match http::Method::from_bytes(op.method.as_str().as_bytes()) {
            Ok(m) => m,
            Err(e) => return inconclusive(row, e.to_string()),
        },
        key_header,
        headers,
        bodies,
        concurrency: a.cfg.concurrency,
        timeout: a.cfg.timeout,
        verify: None,
        sync: a.cfg.sync,
        keep_answers: true,
    };
    // Keys of their own per operation and run: `probe-<run>-<round>`.
    let run = splitmix64(a.nonce ^ fnv(&op.id));
    let exchanged = match plan.exchange(run, a.cfg.rounds, &a.cfg.stop).await {
        Ok(x) => x,
        Err(e) => return inconclusive(row, e.to_string()),
    };
    let cfg = a.cfg;
    let (store, store_note) = match &cfg.verify {
        Some(url) => (Some(by_lookup(a, url, &plan, &exchanged).await), None),
        None => by_get(a, &request, &exchanged).await,
    };
    let required = how == "declared, required";
    let outcome = plan.judge(exchanged, store, required, a.cfg.stop.is_cancelled());
    a.session.absorb(&outcome.exchanges, &outcome.latency_ms);
    row.key_support = how.to_string();
    fill(&mut row, &outcome, a.cfg.concurrency);
    for note in body_note.into_iter().chain(store_note) {
        row.summary.push_str(&format!(" ({note})"));
    }
    row
}

/// The columns, the verdict and its evidence from what the probe saw.
fn fill(row: &mut AuditedOperation, o: &ProbeOutcome, concurrency: usize) {
    row.creations = creations(o);
    let follow = |i: usize| -> String {
        match o.follow_up(i) {
            Some(e) => match e.status {
                Some(s) if e.replayed => format!("{s}, replayed"),
                Some(s) => s.to_string(),
                None => format!("no answer ({})", e.outcome.as_str()),
            },
            None => String::new(),
        }
    };
    row.replay = follow(0);
    row.mismatch = follow(1);
    row.missing_key = follow(2);
    row.verdict = verdict(&o.checks);
    let judged: Vec<&CheckResult> = o
        .checks
        .iter()
        .filter(|c| match row.verdict {
            OperationVerdict::Fail => c.verdict == Verdict::Fail,
            _ => true,
        })
        .collect();
    row.summary = match row.verdict {
        OperationVerdict::Pass => format!(
            "one resource per key under {} rounds of {concurrency} same-key requests; the replay, \
             the different body and the missing key answered as the draft says",
            o.rounds.len()
        ),
        _ => judged
            .iter()
            .map(|c| format!("{}: {}", c.name, c.summary))
            .collect::<Vec<_>>()
            .join("; "),
    };
    row.evidence = judged
        .iter()
        .flat_map(|c| c.evidence.iter().cloned())
        .take(EVIDENCE_MAX)
        .collect();
    if row.evidence.is_empty() {
        row.evidence.push(evidence(format!(
            "{} requests: {}",
            o.requests_sent,
            o.by_status
                .iter()
                .map(|(s, n)| format!("{s}×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    row.checks = o.checks.clone();
}

/// Resources created per round key: from the store's counts when there are, else from the
/// answers (distinct resources named by non-replayed 2xx answers).
fn creations(o: &ProbeOutcome) -> String {
    let keys: Vec<&str> = o.rounds.iter().map(|r| r.key.as_str()).collect();
    if keys.is_empty() {
        return String::new();
    }
    let counted: Option<BTreeMap<&str, u64>> = o.store.as_ref().and_then(|s| {
        let counts = s.counts.as_ref().ok()?;
        keys.iter()
            .map(|k| {
                let c = counts.iter().find(|c| c.key == *k)?.count.as_ref().ok()?;
                Some((*k, *c))
            })
            .collect()
    });
    let per_key: BTreeMap<&str, u64> = counted.unwrap_or_else(|| {
        keys.iter()
            .map(|k| {
                let made: BTreeSet<&str> = o
                    .exchanges
                    .iter()
                    .filter(|e| e.idempotency_key.as_deref() == Some(*k))
                    .filter_map(|e| e.created.as_deref())
                    .collect();
                (*k, made.len() as u64)
            })
            .collect()
    });
    let max = per_key.values().copied().max().unwrap_or(0);
    let over = per_key.values().filter(|n| **n > 1).count();
    let none = per_key.values().filter(|n| **n == 0).count();
    let mut out = if max <= 1 {
        "1".to_string()
    } else {
        format!("max {max} ({over} of {} keys)", per_key.len())
    };
    if none > 0 {
        out.push_str(&format!(", none for {none} key(s)"));
    }
    out
}

/// The bodies of the probe: the built one every round; for the mismatch and the missing key,
/// other bodies valid against the schema (one value changed, else another seed's request). The
/// note says when no second valid body was found.
fn bodies(a: &mut Auditor<'_>, op: &Operation, request: &Request) -> (Bodies, Option<String>) {
    let Some(body) = &request.body else {
        let empty = Bytes::new();
        return (
            Bodies::Fixed {
                body: empty.clone(),
                mismatched: empty.clone(),
                unkeyed: empty,
            },
            Some("no body: the mismatch request is a replay".into()),
        );
    };
    let first = Bytes::from(body.bytes.clone());
    let mut others: Vec<Bytes> = Vec::new();
    let schema = op
        .body
        .as_ref()
        .and_then(|b| b.preferred())
        .and_then(|m| m.schema.clone());
    if openapi::operation::is_json(&body.content_type) {
        let mut v = body.value.clone();
        for _ in 0..2 {
            v = mismatch(&v);
            let valid = match &schema {
                Some(s) => a.builder.check(s, &v).is_ok(),
                None => true,
            };
            if !valid {
                break;
            }
            if let Ok(bytes) = serde_json::to_vec(&v) {
                others.push(Bytes::from(bytes));
            }
        }
    }
    let mut seed = a.cfg.seed;
    for _ in 0..4 {
        if others.len() >= 2 {
            break;
        }
        seed = splitmix64(seed);
        let Ok(mut other) = openapi::RequestBuilder::new(a.api, seed) else {
            break;
        };
        if let Ok(Some(b)) = other.build(op).map(|r| r.body) {
            let bytes = Bytes::from(b.bytes);
            if bytes != first && !others.contains(&bytes) {
                others.push(bytes);
            }
        }
    }
    let note = match others.len() {
        0 => Some("no second valid body: the mismatch request repeats the body".to_string()),
        _ => None,
    };
    let mismatched = others.first().cloned().unwrap_or_else(|| first.clone());
    let unkeyed = others.get(1).cloned().unwrap_or_else(|| mismatched.clone());
    (
        Bodies::Fixed {
            body: first,
            mismatched,
            unkeyed,
        },
        note,
    )
}

/// The counts per round key from `--verify`.
async fn by_lookup(
    a: &Auditor<'_>,
    url: &str,
    plan: &ProbePlan,
    exchanged: &Exchanged,
) -> StoreCounts {
    let keys: Vec<String> = exchanged.rounds.iter().map(|r| r.key.clone()).collect();
    let verify = VerifyConfig::url(url);
    crate::verify::store_counts_with(
        &verify,
        &keys,
        Some(&a.session.target.url),
        &plan.headers,
        &a.cfg.connect,
    )
    .await
}

/// The counts per round key from the document's GET of each resource the key's answers named;
/// none (and why) when the document has no such GET or an answer named nothing.
async fn by_get(
    a: &mut Auditor<'_>,
    request: &Request,
    exchanged: &Exchanged,
) -> (Option<StoreCounts>, Option<String>) {
    let answers = exchanged.rec.answers.as_deref().unwrap_or_default();
    let mut counts = Vec::with_capacity(exchanged.rounds.len());
    let mut source = String::new();
    for round in &exchanged.rounds {
        // Each resource once, with the answer that named it.
        let mut named_by: BTreeMap<String, &Answer> = BTreeMap::new();
        for (e, ans) in exchanged.rec.entries.iter().zip(answers) {
            if e.idempotency_key.as_deref() != Some(round.key.as_str()) || e.created.is_none() {
                continue;
            }
            if let Some(ans) = ans {
                if let Some(id) = named(&request.path_template, ans) {
                    named_by.entry(id).or_insert(ans);
                }
            }
        }
        if named_by.is_empty() {
            return (
                None,
                Some(format!(
                    "no answer of key {} named a resource: judged from the answers",
                    round.key
                )),
            );
        }
        let mut exist = 0u64;
        for ans in named_by.values() {
            match a.look(request, ans).await {
                Ok(Some((label, got))) => {
                    if source.is_empty() {
                        source = label;
                    }
                    if got.answer.is_ok_and(|g| (200..300).contains(&g.status)) {
                        exist += 1;
                    }
                }
                Ok(None) => {
                    return (
                        None,
                        Some(
                            "the document has no GET of the resource: judged from the answers"
                                .into(),
                        ),
                    )
                }
                Err(e) => {
                    return (
                        None,
                        Some(format!(
                            "the resource could not be looked up ({e}): judged from the answers"
                        )),
                    )
                }
            }
        }
        counts.push(KeyCount {
            key: round.key.clone(),
            count: Ok(exist),
        });
    }
    (
        Some(StoreCounts {
            source: format!("{source} (each resource the answers named)"),
            counts: Ok(counts),
        }),
        None,
    )
}

/// FNV-1a of `s`: an operation's share of the run's keys, the same on every platform.
fn fnv(s: &str) -> u64 {
    let mut h = Fnv::new();
    h.write(s.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_get_keys_of_their_own() {
        assert_ne!(fnv("createOrder"), fnv("createRefund"));
        assert_eq!(fnv("createOrder"), fnv("createOrder"));
    }
}
