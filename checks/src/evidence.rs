//! A bounded list of findings.
//!
//! Why bounded: a broken client in a big run can produce a hundred thousand violations; the report
//! needs the first few that prove the point and the total count, not all of them.

use verdict::Evidence;

/// Findings of one check: the first `max` pieces of evidence and how many there were in all.
#[derive(Debug, Clone)]
pub(crate) struct Findings {
    max: usize,
    items: Vec<Evidence>,
    total: u64,
}

impl Findings {
    /// An empty list keeping at most `max` pieces of evidence.
    pub(crate) fn new(max: usize) -> Self {
        Findings {
            max,
            items: Vec::new(),
            total: 0,
        }
    }

    /// Records one finding.
    pub(crate) fn push(&mut self, detail: String, key: Option<String>, seqs: Vec<u64>) {
        self.total += 1;
        if self.items.len() < self.max {
            self.items.push(Evidence { detail, key, seqs });
        }
    }

    /// How many findings were recorded, kept or not.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// True when nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The detail of the first finding, for a summary line.
    pub(crate) fn first_detail(&self) -> Option<&str> {
        self.items.first().map(|e| e.detail.as_str())
    }

    /// The kept evidence.
    pub(crate) fn into_evidence(self) -> Vec<Evidence> {
        self.items
    }
}

/// Adds every piece of `findings` to `result`.
pub(crate) fn attach(mut result: verdict::CheckResult, findings: Findings) -> verdict::CheckResult {
    let total = findings.total();
    for e in findings.into_evidence() {
        result = result.evidence(e);
    }
    result.findings(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_and_counts_all() {
        let mut f = Findings::new(2);
        for i in 0..5 {
            f.push(format!("finding {i}"), None, vec![i]);
        }
        assert_eq!(f.total(), 5);
        assert_eq!(f.first_detail(), Some("finding 0"));
        let kept = f.into_evidence();
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[1].seqs, vec![1]);
    }
}
