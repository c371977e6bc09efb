//! A POST or PATCH without a key: is a client's retry after a lost response safe?
//!
//! The request is sent and answered; the harness then acts as a client that never saw that
//! answer (the response lost on the way back, the server's work done) and sends the same request
//! again. A second resource made by the retry is a duplicate the client cannot avoid: the
//! operation is not safe to retry. The answer that was "lost" is kept as evidence only.
//!
//! Reading the first answer before retrying, instead of closing the connection early, is
//! deliberate: the case that matters is the server having finished its work, and a connection
//! cut mid-request would let a server that cancels on disconnect look safe by chance.

use openapi::Operation;
use reports::model::{AuditedOperation, OperationVerdict};

use super::row::{evidence, inconclusive};
use super::session::{named, quoted, Auditor, Prepared};
use crate::probe::record::Answer;

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
    let retry = a.session.send(out).await;
    let judged = judge(&op.path, &first, &retry);
    row.verdict = judged.verdict;
    row.summary = judged.summary;
    row.creations = judged.creations;
    row.replay = match &retry {
        Ok(r) => format!("{} on retry", r.status),
        Err(_) => "no answer on retry".into(),
    };
    row.evidence.push(evidence(format!(
        "{label} answered {} (the answer the client lost){}",
        first.status,
        named(&op.path, &first).map_or(String::new(), |r| format!(", resource {r}"))
    )));
    match &retry {
        Ok(r) => row.evidence.push(evidence(format!(
            "the same request again answered {}{}",
            r.status,
            named(&op.path, r).map_or_else(|| quoted(r), |id| format!(", resource {id}"))
        ))),
        Err(e) => row
            .evidence
            .push(evidence(format!("the same request again: {e}"))),
    }
    // Both resources looked up through the document's GET, when it has one.
    if judged.two_resources {
        for (what, ans) in [
            ("first", &first),
            ("retry's", retry.as_ref().unwrap_or(&first)),
        ] {
            if let Ok(Some((get, got))) = a.look(&request, ans).await {
                let seen = match got {
                    Ok(g) => g.status.to_string(),
                    Err(e) => e,
                };
                row.evidence
                    .push(evidence(format!("{get} (the {what} resource): {seen}")));
            }
        }
    }
    row
}

/// What the retry showed.
#[derive(Debug, PartialEq)]
pub(super) struct Judged {
    pub(super) verdict: OperationVerdict,
    pub(super) summary: String,
    pub(super) creations: String,
    /// The two answers named different resources.
    pub(super) two_resources: bool,
}

/// The verdict on a request to `path` (`first`, answered 2xx) and its retry.
pub(super) fn judge(path: &str, first: &Answer, retry: &Result<Answer, String>) -> Judged {
    let judged = |verdict, summary: String, creations: &str, two| Judged {
        verdict,
        summary,
        creations: creations.to_string(),
        two_resources: two,
    };
    let retry = match retry {
        Ok(r) => r,
        Err(e) => {
            return judged(
                OperationVerdict::Inconclusive,
                format!("the retry got {e}: whether it is safe cannot be told"),
                "",
                false,
            )
        }
    };
    if retry.status >= 500 {
        return judged(
            OperationVerdict::Fail,
            format!(
                "not safe to retry: the retry of a request the server had processed failed with {}",
                retry.status
            ),
            "",
            false,
        );
    }
    if !(200..300).contains(&retry.status) {
        return judged(
            OperationVerdict::Pass,
            format!(
                "the retry was refused with {} and created nothing{}",
                retry.status,
                quoted(retry)
            ),
            "1",
            false,
        );
    }
    let replayed = retry
        .headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("idempotent-replayed") && v.trim() == "true");
    match (named(path, first), named(path, retry)) {
        _ if replayed => judged(
            OperationVerdict::Pass,
            "the retry was answered with the stored result (Idempotent-Replayed)".into(),
            "1",
            false,
        ),
        (Some(a), Some(b)) if a == b => judged(
            OperationVerdict::Pass,
            format!(
                "the retry answered {} with the same resource {a}",
                retry.status
            ),
            "1",
            false,
        ),
        (Some(a), Some(b)) => judged(
            OperationVerdict::Fail,
            format!(
                "not safe to retry: the retry after a lost response created a second resource \
                 ({a}, then {b}); a client that retries creates duplicates"
            ),
            "2 (request + retry)",
            true,
        ),
        _ => judged(
            OperationVerdict::Inconclusive,
            format!(
                "the answers ({} and {}) name no resource: whether the retry created a second \
                 cannot be told",
                first.status, retry.status
            ),
            "",
            false,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str, headers: &[(&str, &str)]) -> Answer {
        Answer {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: serde_json::from_str(body).ok(),
            text: body.to_string(),
        }
    }

    #[test]
    fn a_retry_that_creates_a_second_resource_is_not_safe() {
        let j = judge(
            "/orders",
            &answer(201, r#"{"id":"a"}"#, &[]),
            &Ok(answer(201, r#"{"id":"b"}"#, &[])),
        );
        assert_eq!(j.verdict, OperationVerdict::Fail);
        assert!(j.summary.starts_with("not safe to retry"), "{}", j.summary);
        assert!(j.two_resources);
    }

    #[test]
    fn the_same_resource_a_replay_or_a_refusal_is_safe() {
        let first = answer(200, r#"{"id":"a","status":"paid"}"#, &[]);
        assert_eq!(
            judge(
                "/orders",
                &first,
                &Ok(answer(200, r#"{"id":"a","status":"paid"}"#, &[]))
            )
            .verdict,
            OperationVerdict::Pass
        );
        assert_eq!(
            judge(
                "/orders",
                &first,
                &Ok(answer(
                    200,
                    r#"{"id":"x"}"#,
                    &[("Idempotent-Replayed", "true")]
                ))
            )
            .verdict,
            OperationVerdict::Pass
        );
        assert_eq!(
            judge("/orders", &first, &Ok(answer(409, "duplicate", &[]))).verdict,
            OperationVerdict::Pass
        );
    }

    #[test]
    fn a_5xx_fails_and_nothing_to_compare_decides_nothing() {
        let first = answer(201, r#"{"id":"a"}"#, &[]);
        assert_eq!(
            judge("/orders", &first, &Ok(answer(500, "", &[]))).verdict,
            OperationVerdict::Fail
        );
        assert_eq!(
            judge("/orders", &answer(204, "", &[]), &Ok(answer(204, "", &[]))).verdict,
            OperationVerdict::Inconclusive
        );
        assert_eq!(
            judge("/orders", &first, &Err("no answer (reset)".into())).verdict,
            OperationVerdict::Inconclusive
        );
    }
}
