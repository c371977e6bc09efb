//! Hand-written journals for the checks' tests.
//!
//! The entries come from [`history::sample`].

use history::{Entry, Facts};
use verdict::CheckResult;

use super::{judge, ChecksConfig};

/// Runs the one check `name` configured by the YAML `check_yaml` (e.g. `{}`) over `entries`.
pub(crate) fn run_one(name: &str, check_yaml: &str, entries: &[Entry]) -> CheckResult {
    judge_one(name, check_yaml, entries, &Facts::default())
}

/// [`run_one`] with facts beside the journal.
pub(crate) fn judge_one(
    name: &str,
    check_yaml: &str,
    entries: &[Entry],
    facts: &Facts,
) -> CheckResult {
    let cfg = ChecksConfig::from_yaml(&format!("{name}: {check_yaml}"))
        .unwrap_or_else(|e| panic!("test config for {name}: {e}"));
    let mut results = judge(&cfg, entries, facts);
    assert_eq!(results.len(), 1, "exactly the check {name} runs");
    results.remove(0)
}

pub(crate) use history::sample::{entry, in_arrival_order};
