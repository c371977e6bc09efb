//! What every check declares about itself, in one place: its name, its configuration, how that
//! configuration scales with `--time-scale`, its bounds, how it is built, and its README row.
//!
//! Why: a check used to be known in five places — the config struct, the list of names, the
//! builder, the validator and the scenario's time scaling — and adding one meant touching all of
//! them. Now a check's module implements [`CheckSpec`] for its configuration and the check is
//! listed once, in [`crate::config`]'s table.
//!
//! [`CheckSpec::judge`] runs one check on its own, as a test asserts it.

use serde::de::DeserializeOwned;
use serde::Serialize;

use history::Facts;
use verdict::{CheckResult, Verdict};

use crate::{Check, ChecksRunner, Context, GroupingConfig, JournalItem, DEFAULT_MAX_EVIDENCE};

/// One check: its configuration type, and everything the rest of the program asks about it.
pub trait CheckSpec: Clone + Default + PartialEq + Serialize + DeserializeOwned {
    /// The stable identifier (`duplicates`, `jitter`, …): the YAML key and the report's name.
    const NAME: &'static str;
    /// The check's row in the README's table of checks.
    const ABOUT: About;

    /// Multiplies the settings that describe the scenario's own time (windows, budgets, the
    /// Retry-After the server sends) by `f`; noise floors and tolerances describe the
    /// measurement, which runs in real time, and stay as written.
    fn scale(&mut self, _f: f64) {}

    /// Bounds serde cannot express, as (field under the check, what is wrong and expected).
    fn validate(&self) -> Result<(), Invalid> {
        Ok(())
    }

    /// A fresh check to feed a history to.
    fn build(&self, ctx: Context) -> Box<dyn Check>;

    /// This check's verdict on a journal (entries in `seq` order, by value or by reference),
    /// with no facts beside it; requests are grouped into operations as
    /// [`GroupingConfig::default`](crate::GroupingConfig) says. The same verdict the CLI reports, to assert in a test:
    ///
    /// ```
    /// use checks::{CheckSpec, RetryOn4xxConfig};
    /// use history::sample::entry;
    ///
    /// // A client that retried a 400 under the same key.
    /// let journal = vec![
    ///     entry(1, 0.0).key("k").client("c").status(400).build(),
    ///     entry(2, 50.0).key("k").client("c").status(400).build(),
    /// ];
    /// RetryOn4xxConfig::default().judge(&journal).assert_fails();
    /// ```
    fn judge<I>(&self, journal: I) -> CheckResult
    where
        I: IntoIterator,
        I::Item: JournalItem,
    {
        self.judge_with(journal, &Facts::default())
    }

    /// This check's verdict on a journal and the facts gathered beside it (the load driver's
    /// figures, a system of record's counts).
    fn judge_with<I>(&self, journal: I, facts: &Facts) -> CheckResult
    where
        I: IntoIterator,
        I::Item: JournalItem,
    {
        // The defaults of a `ChecksConfig`, without the table of every check (which names
        // this trait's implementors).
        let grouping = GroupingConfig::default();
        let ctx = Context::new(&grouping, DEFAULT_MAX_EVIDENCE);
        let mut runner = ChecksRunner::with(&grouping, vec![self.build(ctx)]);
        for item in journal {
            runner.observe(item);
        }
        runner
            .finish(facts)
            .pop()
            .unwrap_or_else(|| CheckResult::new(Self::NAME, Verdict::Inconclusive, "not run"))
    }
}

/// A check's row in the README: what it catches, how, and where it cannot tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct About {
    /// The failure it catches, in a few words.
    pub catches: &'static str,
    /// How it decides.
    pub how: &'static str,
    /// What must have happened for it to pass: without it the check is inconclusive, never a
    /// pass (a check that saw nothing to judge proves nothing).
    pub evidence: &'static str,
    /// What it cannot see.
    pub limits: &'static str,
}

/// A configuration value out of its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The field, relative to the check (`min_jitter`, `by_status.503`).
    pub field: String,
    /// What is wrong and what is expected, with the bound.
    pub message: String,
}

impl Invalid {
    /// `field` is wrong: `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Invalid {
        Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Rejects a negative, infinite or NaN number.
pub fn non_negative(field: &str, value: f64) -> Result<(), Invalid> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!("expected a finite number ≥ 0, got {value}"),
        ))
    }
}

/// Multiplies a millisecond setting by `f`, keeping it at least 1 ms.
pub fn scale_ms(v: &mut u64, f: f64) {
    *v = ((*v as f64) * f).round().clamp(1.0, u64::MAX as f64) as u64;
}
