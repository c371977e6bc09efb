//! The row of an operation: made before its probe decides anything, then filled by the probe;
//! evidence lines, and a row left inconclusive with the reason.

use openapi::Operation;
use reports::model::{AuditedOperation, OperationVerdict, ProbeKind};
use reports::{CheckResult, Evidence, Verdict};

/// A row for `op` before its probe decided anything.
pub(super) fn row(
    op: &Operation,
    probe: ProbeKind,
    key: Option<&(String, &str)>,
) -> AuditedOperation {
    AuditedOperation {
        method: op.method.as_str().to_string(),
        path: op.path.clone(),
        operation_id: op.id.clone(),
        key_header: key.map(|(n, _)| n.clone()),
        key_support: key.map_or("none", |(_, s)| s).to_string(),
        probe,
        verdict: OperationVerdict::Inconclusive,
        summary: String::new(),
        creations: String::new(),
        replay: String::new(),
        mismatch: String::new(),
        missing_key: String::new(),
        evidence: Vec::new(),
        checks: Vec::new(),
        request: None,
        requests_sent: 0,
    }
}

/// One line of evidence.
pub(super) fn evidence(detail: impl Into<String>) -> Evidence {
    Evidence {
        detail: detail.into(),
        key: None,
        seqs: Vec::new(),
    }
}

/// Sets `row` inconclusive with `why`, as the summary and its evidence.
pub(super) fn inconclusive(mut row: AuditedOperation, why: String) -> AuditedOperation {
    row.verdict = OperationVerdict::Inconclusive;
    row.probe = if why.starts_with(COULD_NOT_BUILD) {
        ProbeKind::None
    } else {
        row.probe
    };
    row.evidence.push(evidence(why.clone()));
    row.summary = why;
    row
}

/// How a row that was not judged because no valid request was made begins.
pub const COULD_NOT_BUILD: &str = "could not build a valid request";

/// Fail when a check failed; pass when every check passed (weakly or not); inconclusive when a
/// check could not decide.
pub(super) fn verdict(checks: &[CheckResult]) -> OperationVerdict {
    if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        OperationVerdict::Fail
    } else if !checks.is_empty()
        && checks
            .iter()
            .all(|c| matches!(c.verdict, Verdict::Pass | Verdict::Weak))
    {
        OperationVerdict::Pass
    } else {
        OperationVerdict::Inconclusive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(v: Verdict) -> CheckResult {
        CheckResult::new("duplicates", v, "s")
    }

    #[test]
    fn one_failed_check_fails_the_operation_and_an_undecided_one_leaves_it_inconclusive() {
        use Verdict::*;
        assert_eq!(verdict(&[check(Pass), check(Fail)]), OperationVerdict::Fail);
        assert_eq!(verdict(&[check(Pass), check(Weak)]), OperationVerdict::Pass);
        assert_eq!(
            verdict(&[check(Pass), check(Inconclusive)]),
            OperationVerdict::Inconclusive
        );
        assert_eq!(verdict(&[]), OperationVerdict::Inconclusive);
    }
}
