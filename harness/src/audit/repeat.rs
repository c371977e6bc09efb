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

use bytes::Bytes;
use openapi::{Method, Operation, Request};
use reports::model::{AuditedOperation, OperationVerdict};

use super::row::{evidence, inconclusive};
use super::session::{quoted, statuses, unmade, Auditor, Prepared};
use crate::probe::record::Answer;
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
    let (out, first) = match a.baseline(op, &mut row, &request, None).await {
        Ok(sent) => sent,
        Err(why) => return inconclusive(row, why),
    };
    let label = op.label();
    // Counted after the first request, which may create (one resource), and at the end.
    let listed_after_first = count_list(a, op).await;
    let mut repeats = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        repeats.push(a.session.send(out.clone()).await);
    }
    let looked = a.look(&request, &first).await;
    let after_repeats = match looked {
        Ok(Some((get, got))) => Some((get, got)),
        _ => None,
    };

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
        (Some(cr), Method::Delete) => match a.look(cr, &first).await {
            Ok(Some((get, got))) => Some((get, got)),
            _ => None,
        },
        _ => match a.look(&request, &first).await {
            Ok(Some((get, got))) => Some((get, got)),
            _ => None,
        },
    };
    let listed_after_all = count_list(a, op).await;

    let seen = Seen {
        method: op.method,
        first: &first,
        repeats: &repeats,
        concurrent: &concurrent,
        after_repeats: after_repeats.as_ref().map(|(_, g)| g),
        after_burst: after_burst.as_ref().map(|(_, g)| g),
        listed: listed_after_first.zip(listed_after_all),
    };
    let judged = judge(&seen);
    row.verdict = judged.0;
    row.summary = judged.1;
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
            let shown = match got {
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

/// `concurrency` copies of `request` released together, without a key.
async fn burst(
    a: &mut Auditor<'_>,
    op: &Operation,
    request: &Request,
) -> Vec<Result<Answer, String>> {
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
    rec.entries
        .iter()
        .zip(answers)
        .map(|(e, ans)| ans.ok_or_else(|| format!("no answer ({})", e.outcome.as_str())))
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

/// What a PUT's or DELETE's probe saw.
pub(super) struct Seen<'s> {
    pub(super) method: Method,
    pub(super) first: &'s Answer,
    pub(super) repeats: &'s [Result<Answer, String>],
    pub(super) concurrent: &'s [Result<Answer, String>],
    /// The GET of the resource after the repeats, when the document has one.
    pub(super) after_repeats: Option<&'s Result<Answer, String>>,
    /// The GET after the concurrent requests.
    pub(super) after_burst: Option<&'s Result<Answer, String>>,
    /// The list's size after the first request and at the end.
    pub(super) listed: Option<(usize, usize)>,
}

/// The verdict and its sentence.
pub(super) fn judge(s: &Seen<'_>) -> (OperationVerdict, String) {
    let fail = |why: String| (OperationVerdict::Fail, why);
    let server_error = |set: &[Result<Answer, String>]| {
        set.iter().find_map(|r| match r {
            Ok(a) if a.status >= 500 => Some(format!("{}{}", a.status, quoted(a))),
            Err(e) => Some(e.clone()),
            _ => None,
        })
    };
    if let Some(e) = server_error(s.repeats) {
        return fail(format!(
            "the same {} sent again was answered {e}: a client's retry gets an error",
            s.method
        ));
    }
    if let Some(e) = server_error(s.concurrent) {
        return fail(format!(
            "concurrent identical {}s: one was answered {e}",
            s.method
        ));
    }
    let got =
        |g: Option<&Result<Answer, String>>| g.and_then(|r| r.as_ref().ok()).map(|a| a.status);
    match s.method {
        Method::Put => {
            if let Some(r) = s
                .repeats
                .iter()
                .flatten()
                .find(|r| !(200..300).contains(&r.status))
            {
                return fail(format!(
                    "the same PUT sent again was answered {}{}: PUT is idempotent, a repeat \
                     must succeed as the first did",
                    r.status,
                    quoted(r)
                ));
            }
            for g in [got(s.after_repeats), got(s.after_burst)]
                .into_iter()
                .flatten()
            {
                if !(200..300).contains(&g) {
                    return fail(format!(
                        "the resource the PUT answered {} for is not there: its GET answered {g}",
                        s.first.status
                    ));
                }
            }
            if let Some((x, y)) = s.listed {
                if y != x {
                    return fail(format!(
                        "repeated and concurrent PUTs of one resource changed the list from {x} \
                         to {y} items: two PUTs must leave one resource"
                    ));
                }
            }
            (
                OperationVerdict::Pass,
                format!(
                    "repeated and concurrent PUTs answered {}; the resource is there once",
                    statuses(s.repeats.iter().chain(s.concurrent))
                ),
            )
        }
        _ => {
            if let Some(g) = got(s.after_repeats).filter(|g| (200..300).contains(g)) {
                return fail(format!(
                    "DELETE answered {} yet the resource's GET still answers {g}",
                    s.first.status
                ));
            }
            if let Some(g) = got(s.after_burst).filter(|g| (200..300).contains(g)) {
                return fail(format!(
                    "after concurrent DELETEs the resource's GET still answers {g}"
                ));
            }
            (
                OperationVerdict::Pass,
                format!(
                    "a repeated DELETE answered {}, concurrent ones {}; never a 5xx",
                    statuses(s.repeats),
                    if s.concurrent.is_empty() {
                        "were not sent".to_string()
                    } else {
                        statuses(s.concurrent)
                    }
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ans(status: u16) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: None,
            text: String::new(),
        }
    }

    fn seen<'s>(
        method: Method,
        first: &'s Answer,
        repeats: &'s [Result<Answer, String>],
        concurrent: &'s [Result<Answer, String>],
        after: Option<&'s Result<Answer, String>>,
        listed: Option<(usize, usize)>,
    ) -> Seen<'s> {
        Seen {
            method,
            first,
            repeats,
            concurrent,
            after_repeats: after,
            after_burst: after,
            listed,
        }
    }

    #[test]
    fn a_second_delete_may_answer_404_but_never_5xx() {
        let first = ans(204);
        let gone = Ok(ans(404));
        let still = Ok(ans(200));
        let (again, together) = ([Ok(ans(404)), Ok(ans(404))], [Ok(ans(204)), Ok(ans(404))]);
        let ok = seen(Method::Delete, &first, &again, &together, Some(&gone), None);
        assert_eq!(judge(&ok).0, OperationVerdict::Pass);
        let failed = [Ok(ans(500))];
        let bad = seen(Method::Delete, &first, &failed, &[], Some(&gone), None);
        assert_eq!(judge(&bad).0, OperationVerdict::Fail);
        let deleted = [Ok(ans(204))];
        let kept = seen(Method::Delete, &first, &deleted, &[], Some(&still), None);
        assert_eq!(judge(&kept).0, OperationVerdict::Fail);
    }

    #[test]
    fn two_puts_leave_one_resource() {
        let first = ans(201);
        let there = Ok(ans(200));
        let reps = [Ok(ans(200)), Ok(ans(200))];
        let ok = seen(
            Method::Put,
            &first,
            &reps,
            &reps,
            Some(&there),
            Some((1, 1)),
        );
        assert_eq!(judge(&ok).0, OperationVerdict::Pass);
        let grew = seen(
            Method::Put,
            &first,
            &reps,
            &reps,
            Some(&there),
            Some((1, 4)),
        );
        let (v, why) = judge(&grew);
        assert_eq!(v, OperationVerdict::Fail);
        assert!(why.contains("from 1 to 4"), "{why}");
        let conflict = [Ok(ans(409))];
        let refused = seen(Method::Put, &first, &conflict, &[], Some(&there), None);
        assert_eq!(judge(&refused).0, OperationVerdict::Fail);
        let died = [Err("no answer (closed)".to_string())];
        let crashed = seen(Method::Put, &first, &reps, &died, Some(&there), None);
        assert_eq!(judge(&crashed).0, OperationVerdict::Fail);
    }

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
