//! `lost_response`: a request without an idempotency key, answered, then sent again as a client
//! sends it when the answer was lost on the way back — does the retry make a second resource?
//!
//! Why: a client that timed out cannot tell a request the server never saw from one whose answer
//! it lost after the server's work was done, so it retries; an operation is safe to retry only
//! if the retry of a processed request makes nothing new. A retry refused (4xx), answered with
//! the stored result (`Idempotent-Replayed`) or naming the same resource as the first answer is
//! safe; one naming another resource made a duplicate; a server error on it means the client's
//! retry fails. Answers that name no resource cannot tell, and neither can a retry that got no
//! answer.
//!
//! Read from two exchanges a probe recorded (the request, answered 2xx, and its retry), each
//! entry's `resource` being what its answer named. Metric: `created`, the resources the request
//! and its retry made (1, or 2 when the retry made another), when it can be told.

use verdict::{CheckResult, Verdict};

use crate::exchange::Exchange;

/// The check's name, as its result carries it.
pub const NAME: &str = "lost_response";

/// The verdict on `first` (answered 2xx, the answer the client is taken to have lost) and
/// `retry`, the same request sent again.
pub fn judge(first: &Exchange<'_>, retry: &Exchange<'_>) -> CheckResult {
    let result = |verdict, summary: String| {
        CheckResult::new(NAME, verdict, summary.clone()).evidence(retry.evidence(summary))
    };
    let Some(status) = retry.status() else {
        return result(
            Verdict::Inconclusive,
            format!(
                "the retry got {}: whether it is safe cannot be told",
                retry.said
            ),
        );
    };
    if status >= 500 {
        return result(
            Verdict::Fail,
            format!(
                "not safe to retry: the retry of a request the server had processed failed with \
                 {status}"
            ),
        );
    }
    if !(200..300).contains(&status) {
        return result(
            Verdict::Pass,
            format!(
                "the retry was refused with {status} and created nothing{}",
                retry.quoted()
            ),
        )
        .metric("created", 1);
    }
    if retry.entry.replayed {
        return result(
            Verdict::Pass,
            "the retry was answered with the stored result (Idempotent-Replayed)".into(),
        )
        .metric("created", 1);
    }
    match (&first.entry.resource, &retry.entry.resource) {
        (Some(a), Some(b)) if a == b => result(
            Verdict::Pass,
            format!("the retry answered {status} with the same resource {a}"),
        )
        .metric("created", 1),
        (Some(a), Some(b)) => result(
            Verdict::Fail,
            format!(
                "not safe to retry: the retry after a lost response created a second resource \
                 ({a}, then {b}); a client that retries creates duplicates"
            ),
        )
        .metric("created", 2),
        _ => result(
            Verdict::Inconclusive,
            format!(
                "the answers ({} and {status}) name no resource: whether the retry created a \
                 second cannot be told",
                first
                    .status()
                    .map_or_else(|| "no answer".to_string(), |s| s.to_string())
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::sample::entry;
    use history::{Entry, Outcome};

    fn answered(seq: u64, status: u16, resource: Option<&str>) -> Entry {
        let mut e = entry(seq, seq as f64).status(status);
        if let Some(r) = resource {
            e = e.resource(r);
        }
        e.build()
    }

    fn x<'h>(entry: &'h Entry, said: &'h str) -> Exchange<'h> {
        Exchange { entry, said }
    }

    #[test]
    fn a_retry_that_creates_a_second_resource_is_not_safe() {
        let (first, retry) = (answered(1, 201, Some("a")), answered(2, 201, Some("b")));
        let r = judge(&x(&first, ""), &x(&retry, ""));
        r.assert_fails();
        assert!(r.summary.starts_with("not safe to retry"), "{r}");
        assert!(r.summary.contains("(a, then b)"), "{r}");
        assert_eq!(r.metrics["created"], 2);
        assert_eq!(r.evidence[0].seqs, [2], "the retry is the evidence");
    }

    #[test]
    fn the_same_resource_a_replay_or_a_refusal_is_safe() {
        let first = answered(1, 200, Some("a"));
        let same = answered(2, 200, Some("a"));
        let r = judge(&x(&first, ""), &x(&same, ""));
        r.assert_passes();
        assert_eq!(r.summary, "the retry answered 200 with the same resource a");
        assert_eq!(r.metrics["created"], 1);
        let replay = entry(2, 2).resource("x").replayed().build();
        judge(&x(&first, ""), &x(&replay, "")).assert_passes();
        let refused = answered(2, 409, None);
        let r = judge(&x(&first, ""), &x(&refused, "duplicate"));
        r.assert_passes();
        assert_eq!(
            r.summary,
            "the retry was refused with 409 and created nothing: \"duplicate\""
        );
    }

    #[test]
    fn a_5xx_fails_and_nothing_to_compare_decides_nothing() {
        let first = answered(1, 201, Some("a"));
        judge(&x(&first, ""), &x(&answered(2, 500, None), "")).assert_fails();
        let (bare, bare_again) = (answered(1, 204, None), answered(2, 204, None));
        let r = judge(&x(&bare, ""), &x(&bare_again, ""));
        assert_eq!(r.verdict, Verdict::Inconclusive);
        assert!(
            r.summary
                .starts_with("the answers (204 and 204) name no resource"),
            "{r}"
        );
        let lost = entry(2, 2).no_response(Outcome::Reset).build();
        let r = judge(
            &x(&first, ""),
            &x(&lost, "no answer (reset): reset by peer"),
        );
        assert_eq!(r.verdict, Verdict::Inconclusive);
        assert!(!r.metrics.contains_key("created"));
        assert_eq!(
            r.summary,
            "the retry got no answer (reset): reset by peer: whether it is safe cannot be told"
        );
    }
}
