//! A POST or PATCH without a key: is a client's retry after a lost response safe?
//!
//! The request is sent and answered; the harness then acts as a client that never saw that
//! answer (the response lost on the way back, the server's work done) and sends the same request
//! again. A second resource made by the retry is a duplicate the client cannot avoid: the
//! operation is not safe to retry. The answer that was "lost" is kept as evidence only.
//!
//! The verdict is the `lost_response` check's (`checks` crate), on the two exchanges recorded as
//! journal entries, each naming the resource its answer named.
//!
//! Reading the first answer before retrying, instead of closing the connection early, is
//! deliberate: the case that matters is the server having finished its work, and a connection
//! cut mid-request would let a server that cancels on disconnect look safe by chance.

use checks::exchange::Exchange;
use checks::lost_response;
use openapi::Operation;
use reports::model::AuditedOperation;

use super::row::{evidence, inconclusive, verdict};
use super::session::{named, quoted, Auditor, Prepared};

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
    let retry = a.session.exchange(out, Some(&op.path)).await;
    let judged = lost_response::judge(
        &Exchange {
            entry: &first_entry,
            said: &first.text,
        },
        &retry.exchange(),
    );
    let created = judged.metrics.get("created").and_then(|n| n.as_u64());
    row.verdict = verdict(std::slice::from_ref(&judged));
    row.summary = judged.summary;
    row.creations = match created {
        Some(1) => "1".into(),
        Some(2) => "2 (request + retry)".into(),
        _ => String::new(),
    };
    let retry = retry.answer;
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
    if created == Some(2) {
        for (what, ans) in [
            ("first", &first),
            ("retry's", retry.as_ref().unwrap_or(&first)),
        ] {
            if let Ok(Some((get, got))) = a.look(&request, ans).await {
                let seen = match got.answer {
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
