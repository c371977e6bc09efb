//! PUT and DELETE: idempotent by RFC 9110 (§9.2.2), so the same request sent again, or sent
//! several times at once, must leave the state one request leaves — and a client that retries
//! must not get a server error for it.
//!
//! PUT: the request, two repeats, then `concurrency` copies released together; every answer a
//! 2xx; afterwards the document's GET finds the resource, and its list (when it has one and can
//! be counted) holds as many items as after the first PUT. DELETE: the request on a resource
//! made for it, two repeats (404, 410 or a 2xx; never a 5xx), the GET then finds nothing; and
//! `concurrency` DELETEs released together on a fresh resource, none answered with a 5xx (not
//! sent when the id is the document's example rather than a resource the audit can make again:
//! the first DELETE removed the only one it names).
//!
//! The verdict is the `repeated_request` check's (`checks` crate), on the exchanges recorded as
//! journal entries and grouped by the part each played.

use bytes::Bytes;
use checks::exchange::{statuses, Exchange};
use checks::repeated_request::{self, Repeated};
use openapi::{Method, Operation, Request};
use reports::model::AuditedOperation;

use super::row::{evidence, inconclusive, verdict};
use super::session::{unmade, Auditor, Journaled, Prepared};
use crate::probe::{Bodies, ProbePlan, Recording};

/// Sequential repeats after the first request.
const REPEATS: usize = 2;

pub(super) async fn probe(
    a: &mut Auditor<'_>,
    op: &Operation,
    prepared: Prepared,
    mut row: AuditedOperation,
) -> AuditedOperation {
    let request = prepared.request;
    let (out, first_entry, first) = match a.baseline(op, &mut row, &request, None).await {
        Ok(sent) => sent,
        Err(why) => return inconclusive(row, why),
    };
    let label = op.label();
    // Counted after the first request, which may create (one resource), and at the end.
    let listed_after_first = count_list(a, op).await;
    let mut repeats = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        repeats.push(a.session.exchange(out.clone(), None).await);
    }
    let after_repeats = a.look(&request, &first).await.ok().flatten();

    // The concurrent part: on the same resource for a PUT, on a fresh one for a DELETE.
    let concurrent_request = if op.method == Method::Delete {
        match a.prepare(op).await {
            // The same value again names the resource the first DELETE removed: concurrent
            // DELETEs of it would judge nothing.
            Ok(r) if !unmade(&r).is_empty() => {
                row.evidence.push(evidence(format!(
                    "no fresh resource for the concurrent DELETEs: {}",
                    unmade(&r)
                        .iter()
                        .map(|u| u.detail.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                )));
                None
            }
            Ok(r) => Some(r),
            Err(why) => {
                row.evidence.push(evidence(format!(
                    "no fresh resource for the concurrent DELETEs: {why}"
                )));
                None
            }
        }
    } else {
        Some(request.clone())
    };
    let mut concurrent = Vec::new();
    if let Some(cr) = &concurrent_request {
        concurrent = burst(a, op, cr).await;
    }
    let after_burst = match (&concurrent_request, op.method) {
        (Some(cr), Method::Delete) => a.look(cr, &first).await.ok().flatten(),
        _ => a.look(&request, &first).await.ok().flatten(),
    };
    let listed_after_all = count_list(a, op).await;

    let repeats: Vec<Exchange<'_>> = repeats.iter().map(Journaled::exchange).collect();
    let concurrent: Vec<Exchange<'_>> = concurrent.iter().map(Journaled::exchange).collect();
    let judged = repeated_request::judge(&Repeated {
        first: Exchange {
            entry: &first_entry,
            said: &first.text,
        },
        repeats: &repeats,
        concurrent: &concurrent,
        after_repeats: after_repeats.as_ref().map(|(_, g)| g.exchange()),
        after_burst: after_burst.as_ref().map(|(_, g)| g.exchange()),
        listed: listed_after_first.zip(listed_after_all),
    });
    row.verdict = verdict(std::slice::from_ref(&judged));
    row.summary = judged.summary;
    row.replay = format!("{} (repeats)", statuses(&repeats));
    row.creations = format!(
        "{} at once: {}",
        concurrent.len(),
        if concurrent.is_empty() {
            "not sent".to_string()
        } else {
            statuses(&concurrent)
        }
    );
    row.evidence.push(evidence(format!(
        "{label} answered {}; again: {}",
        first.status,
        statuses(&repeats)
    )));
    if !concurrent.is_empty() {
        row.evidence.push(evidence(format!(
            "{} at once: {}",
            concurrent.len(),
            statuses(&concurrent)
        )));
    }
    for (when, looked) in [
        ("after the repeats", &after_repeats),
        ("after the burst", &after_burst),
    ] {
        if let Some((get, got)) = looked {
            let shown = match &got.answer {
                Ok(g) => g.status.to_string(),
                Err(e) => e.clone(),
            };
            row.evidence
                .push(evidence(format!("{get} {when}: {shown}")));
        }
    }
    if let (Some(x), Some(y)) = (listed_after_first, listed_after_all) {
        row.evidence.push(evidence(format!(
            "the list held {x} items after the first request, {y} at the end"
        )));
    }
    if after_repeats.is_none() {
        row.summary
            .push_str(" (the document has no GET of the resource to look at it)");
    }
    row
}

/// `concurrency` copies of `request` released together, without a key; each exchange
/// numbered in the audit's journal.
async fn burst(a: &mut Auditor<'_>, op: &Operation, request: &Request) -> Vec<Journaled> {
    let Ok(headers) = a.session.headers(request, None) else {
        return Vec::new();
    };
    let Ok(method) = http::Method::from_bytes(op.method.as_str().as_bytes()) else {
        return Vec::new();
    };
    let uri = a.session.target.path(&request.target());
    let body = request
        .body
        .as_ref()
        .map(|b| Bytes::from(b.bytes.clone()))
        .unwrap_or_default();
    let plan = ProbePlan {
        url: format!("{}{}", a.session.target.origin(), uri),
        target: a.session.target.clone(),
        path: uri.split('?').next().unwrap_or(&uri).to_string(),
        uri,
        method: method.clone(),
        // Not sent: the burst carries no key.
        key_header: http::header::HeaderName::from_static("idempotency-key"),
        headers,
        bodies: Bodies::Fixed {
            body: body.clone(),
            mismatched: body.clone(),
            unkeyed: body.clone(),
        },
        concurrency: a.cfg.concurrency,
        timeout: a.cfg.timeout,
        verify: None,
        sync: a.cfg.sync,
        keep_answers: true,
    };
    let mut rec = Recording::new(&method, &plan.path, &plan.headers);
    rec.keep_answers();
    plan.burst(None, body, &mut rec).await;
    a.session.absorb(&rec.entries, &rec.latency_ms);
    let answers = rec.answers.unwrap_or_default();
    let offset = a.session.since_start(rec.started);
    rec.entries
        .into_iter()
        .zip(answers)
        .map(|(mut entry, ans)| {
            entry.seq = a.session.next_seq();
            entry.conn_id = entry.seq;
            entry.t_recv_us += offset;
            entry.t_done_us += offset;
            let answer = ans.ok_or_else(|| format!("no answer ({})", entry.outcome.as_str()));
            Journaled { entry, answer }
        })
        .collect()
}

/// The size of the operation's collection, when the document has a list GET without path
/// parameters and its answer is a JSON array (or an object with one array of items).
async fn count_list(a: &mut Auditor<'_>, op: &Operation) -> Option<usize> {
    let list_id = a.plan.verification(&op.id)?.list.clone()?;
    let list = a.api.operation(&list_id)?;
    if !list.path_parameter_names().is_empty() {
        return None;
    }
    let req = a.builder.build(list).ok()?;
    let out = a.session.outgoing(&req, None, None).ok()?;
    let got = a.session.send(out).await.ok()?;
    if !(200..300).contains(&got.status) {
        return None;
    }
    items(got.body.as_ref()?)
}

/// How many items a list answer holds.
fn items(v: &serde_json::Value) -> Option<usize> {
    match v {
        serde_json::Value::Array(a) => Some(a.len()),
        serde_json::Value::Object(m) => {
            let arrays: Vec<&Vec<serde_json::Value>> =
                m.values().filter_map(|x| x.as_array()).collect();
            match arrays.as_slice() {
                [one] => Some(one.len()),
                _ => ["data", "items", "results"]
                    .iter()
                    .find_map(|k| m.get(*k)?.as_array().map(Vec::len)),
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_answers_are_counted_as_arrays_or_one_array_field() {
        assert_eq!(items(&serde_json::json!([1, 2])), Some(2));
        assert_eq!(
            items(&serde_json::json!({ "things": [1], "total": 1 })),
            Some(1)
        );
        assert_eq!(
            items(&serde_json::json!({ "data": [1, 2, 3], "links": [] })),
            Some(3)
        );
        assert_eq!(items(&serde_json::json!({ "count": 3 })), None);
    }
}
