//! Which checks run, with which thresholds.
//!
//! Why one document: a scenario says what it expects of the system under test ("no duplicates",
//! "jitter of at least 0.1", "p99 < 200ms") next to the faults it injects. A check runs when its
//! name is present (`duplicates: {}` or just `duplicates:`); its thresholds default to sane values.
//! [`ChecksConfig::default`] runs every check with its defaults (what `harness analyze` does
//! without a config). Durations are in milliseconds (`_ms`), Retry-After in seconds (`_s`).
//!
//! ```yaml
//! grouping:                 # shared by every check (all optional)
//!   header: x-operation-id  # an operation-id header, preferred over the Idempotency-Key
//!   horizon_ms: 60000       # an operation idle this long is closed
//! max_evidence: 20
//! duplicates: {}
//! idempotency_semantics: { require_key_paths: [/orders] }
//! retry_on_4xx: { never_retry: [400, 401, 403, 404, 422], may_retry: [408, 409, 429] }
//! jitter: { min_dispersion: 0.1, noise_floor_ms: 5, min_samples: 20 }
//! retry_after: { default_s: 1, by_rule: { throttle: 2 } }
//! key_stability: { window_ms: 60000 }
//! circuit_breaker: { min_outage_ms: 5000, require_probe: true }
//! amplification: { bottom_path_prefix: /inventory, max_attempts_per_request: 4 }
//! total_timeout: { budget_ms: 10000 }
//! state_transition: {}
//! thresholds: { rules: ["p99 < 200ms", "error_rate < 1%", "throughput > 500/s"] }
//! ```
//!
//! Each check's fields and defaults are documented with its config struct
//! ([`DuplicatesConfig`], [`JitterConfig`], …).

use serde::{Deserialize, Deserializer, Serialize};
use thiserror::Error;

use super::amplification::{AmplificationCheck, AmplificationConfig};
use super::circuit_breaker::{CircuitBreakerCheck, CircuitBreakerConfig};
use super::duplicates::{DuplicatesCheck, DuplicatesConfig};
use super::idempotency_semantics::{IdempotencySemanticsCheck, IdempotencySemanticsConfig};
use super::jitter::{JitterCheck, JitterConfig};
use super::key_stability::{KeyStabilityCheck, KeyStabilityConfig};
use super::operations::GroupingConfig;
use super::retry_after::{RetryAfterCheck, RetryAfterConfig};
use super::retry_on_4xx::{RetryOn4xxCheck, RetryOn4xxConfig};
use super::state_transition::{StateTransitionCheck, StateTransitionConfig};
use super::thresholds::{ThresholdsCheck, ThresholdsConfig};
use super::total_timeout::{TotalTimeoutCheck, TotalTimeoutConfig};
use super::{Check, Context};

/// Stable identifiers of every check, in the order results are reported.
pub const CHECK_NAMES: [&str; 11] = [
    "duplicates",
    "idempotency_semantics",
    "retry_on_4xx",
    "jitter",
    "retry_after",
    "key_stability",
    "circuit_breaker",
    "amplification",
    "total_timeout",
    "state_transition",
    "thresholds",
];

/// The checks to run and their configurations; an absent check does not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChecksConfig {
    /// How requests are grouped into operations (shared by every check).
    #[serde(default)]
    pub grouping: GroupingConfig,
    /// Most pieces of evidence one check reports (the total count is always in its metrics).
    #[serde(default = "default_max_evidence")]
    pub max_evidence: usize,
    /// More than one resource created for one Idempotency-Key.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub duplicates: Option<DuplicatesConfig>,
    /// The Idempotency-Key protocol: one 201, replays, 409 in flight, 422 on a different body.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub idempotency_semantics: Option<IdempotencySemanticsConfig>,
    /// A retry after a 4xx that must not be retried (400, 401, 403, 404, 422).
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_on_4xx: Option<RetryOn4xxConfig>,
    /// Retry delays of operations that failed together: no jitter, too little, or none at all.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub jitter: Option<JitterConfig>,
    /// A retry earlier than the Retry-After it was given.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_after: Option<RetryAfterConfig>,
    /// The same client and body retried under a new Idempotency-Key.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub key_stability: Option<KeyStabilityConfig>,
    /// A client whose attempt rate does not fall during a sustained outage.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub circuit_breaker: Option<CircuitBreakerConfig>,
    /// Bottom attempts per top request, above a threshold.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub amplification: Option<AmplificationConfig>,
    /// An operation over its time budget, or a request received after its x-deadline.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub total_timeout: Option<TotalTimeoutConfig>,
    /// A resource that made the same state transition twice (a double payment).
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub state_transition: Option<StateTransitionConfig>,
    /// Latency, error-rate and throughput rules such as `p99 < 200ms`.
    #[serde(
        default,
        deserialize_with = "enabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub thresholds: Option<ThresholdsConfig>,
}

fn default_max_evidence() -> usize {
    20
}

/// A present key enables its check, even with no value (`duplicates:` reads as `duplicates: {}`).
fn enabled<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

impl Default for ChecksConfig {
    /// Every check, with its default thresholds.
    fn default() -> Self {
        ChecksConfig {
            grouping: GroupingConfig::default(),
            max_evidence: default_max_evidence(),
            duplicates: Some(DuplicatesConfig::default()),
            idempotency_semantics: Some(IdempotencySemanticsConfig::default()),
            retry_on_4xx: Some(RetryOn4xxConfig::default()),
            jitter: Some(JitterConfig::default()),
            retry_after: Some(RetryAfterConfig::default()),
            key_stability: Some(KeyStabilityConfig::default()),
            circuit_breaker: Some(CircuitBreakerConfig::default()),
            amplification: Some(AmplificationConfig::default()),
            total_timeout: Some(TotalTimeoutConfig::default()),
            state_transition: Some(StateTransitionConfig::default()),
            thresholds: Some(ThresholdsConfig::default()),
        }
    }
}

/// A checks configuration that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The YAML does not parse or does not fit the schema.
    #[error("checks config{}: at `{path}`: {message}", at_line(*.line, *.column))]
    Parse {
        /// Dotted path of the offending field (`.` for the top level).
        path: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A value parses but makes no sense.
    #[error("checks config: at `{path}`: {message}")]
    Invalid {
        /// Dotted path of the offending field.
        path: String,
        /// What is wrong and what is expected.
        message: String,
    },
}

fn at_line(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(", line {l} column {c}"),
        (Some(l), None) => format!(", line {l}"),
        _ => String::new(),
    }
}

/// Rejects a negative, infinite or NaN number.
pub(crate) fn non_negative(path: &str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            path: path.to_string(),
            message: format!("expected a finite number >= 0, got {value}"),
        })
    }
}

impl ChecksConfig {
    /// Parses and validates a YAML document.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let de = serde_norway::Deserializer::from_str(text);
        let cfg: ChecksConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let loc = inner.location();
            let mut message = inner.to_string();
            // serde_norway adds its own "path: " prefix and " at line L column C" suffix; the
            // error carries both already.
            if let Some(l) = &loc {
                let suffix = format!(" at line {} column {}", l.line(), l.column());
                if let Some(m) = message.strip_suffix(&suffix) {
                    message = m.to_string();
                }
            }
            if let Some((head, tail)) = message.split_once(": ") {
                if !head.is_empty() && !head.contains(' ') && path.starts_with(head) {
                    message = tail.to_string();
                }
            }
            ConfigError::Parse {
                path,
                line: loc.as_ref().map(|l| l.line()),
                column: loc.as_ref().map(|l| l.column()),
                message,
            }
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// No check at all (enable them one by one).
    pub fn none() -> Self {
        ChecksConfig {
            grouping: GroupingConfig::default(),
            max_evidence: default_max_evidence(),
            duplicates: None,
            idempotency_semantics: None,
            retry_on_4xx: None,
            jitter: None,
            retry_after: None,
            key_stability: None,
            circuit_breaker: None,
            amplification: None,
            total_timeout: None,
            state_transition: None,
            thresholds: None,
        }
    }

    /// Checks numbers serde cannot: ranges, finiteness.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.grouping.horizon_ms == 0 {
            return Err(ConfigError::Invalid {
                path: "grouping.horizon_ms".into(),
                message: "expected a horizon above 0 ms".into(),
            });
        }
        if let Some(c) = &self.jitter {
            non_negative("jitter.min_dispersion", c.min_dispersion)?;
            non_negative("jitter.noise_floor_ms", c.noise_floor_ms)?;
            non_negative("jitter.immediate_ms", c.immediate_ms)?;
        }
        if let Some(c) = &self.circuit_breaker {
            non_negative("circuit_breaker.max_rate_ratio", c.max_rate_ratio)?;
        }
        if let Some(c) = &self.amplification {
            non_negative(
                "amplification.max_attempts_per_request",
                c.max_attempts_per_request,
            )?;
        }
        if let Some(c) = &self.retry_after {
            if let Some(d) = c.default_s {
                non_negative("retry_after.default_s", d)?;
            }
            for (status, s) in &c.by_status {
                non_negative(&format!("retry_after.by_status.{status}"), *s)?;
            }
            for (rule, s) in &c.by_rule {
                non_negative(&format!("retry_after.by_rule.{rule}"), *s)?;
            }
        }
        Ok(())
    }

    /// Names of the enabled checks, in report order.
    pub fn enabled_names(&self) -> Vec<&'static str> {
        self.build().iter().map(|c| c.name()).collect()
    }

    /// The enabled checks, in the order of [`CHECK_NAMES`].
    pub(crate) fn build(&self) -> Vec<Box<dyn Check>> {
        let ctx = Context {
            horizon_us: self.grouping.horizon_ms.saturating_mul(1000),
            max_evidence: self.max_evidence,
        };
        let mut checks: Vec<Box<dyn Check>> = Vec::new();
        if let Some(c) = &self.duplicates {
            checks.push(Box::new(DuplicatesCheck::new(c, ctx)));
        }
        if let Some(c) = &self.idempotency_semantics {
            checks.push(Box::new(IdempotencySemanticsCheck::new(c, ctx)));
        }
        if let Some(c) = &self.retry_on_4xx {
            checks.push(Box::new(RetryOn4xxCheck::new(c, ctx)));
        }
        if let Some(c) = &self.jitter {
            checks.push(Box::new(JitterCheck::new(c, ctx)));
        }
        if let Some(c) = &self.retry_after {
            checks.push(Box::new(RetryAfterCheck::new(c, ctx)));
        }
        if let Some(c) = &self.key_stability {
            checks.push(Box::new(KeyStabilityCheck::new(c, ctx)));
        }
        if let Some(c) = &self.circuit_breaker {
            checks.push(Box::new(CircuitBreakerCheck::new(c, ctx)));
        }
        if let Some(c) = &self.amplification {
            checks.push(Box::new(AmplificationCheck::new(c, ctx)));
        }
        if let Some(c) = &self.total_timeout {
            checks.push(Box::new(TotalTimeoutCheck::new(c, ctx)));
        }
        if let Some(c) = &self.state_transition {
            checks.push(Box::new(StateTransitionCheck::new(c, ctx)));
        }
        if let Some(c) = &self.thresholds {
            checks.push(Box::new(ThresholdsCheck::new(c, ctx)));
        }
        checks.sort_by_key(|c| CHECK_NAMES.iter().position(|n| *n == c.name()));
        checks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_key_enables_its_check() {
        let cfg = ChecksConfig::from_yaml("duplicates:\n").expect("valid");
        assert_eq!(cfg.duplicates, Some(DuplicatesConfig::default()));
        let cfg = ChecksConfig::from_yaml("{}").expect("valid");
        assert!(cfg.enabled_names().is_empty());
    }

    #[test]
    fn default_runs_every_check_in_report_order() {
        assert_eq!(
            ChecksConfig::default().enabled_names(),
            CHECK_NAMES.to_vec()
        );
        assert!(ChecksConfig::none().enabled_names().is_empty());
    }

    #[test]
    fn parses_the_module_doc_example() {
        let doc = include_str!("config.rs");
        let yaml: String = doc
            .lines()
            .skip_while(|l| *l != "//! ```yaml")
            .skip(1)
            .take_while(|l| *l != "//! ```")
            .map(|l| {
                format!(
                    "{}\n",
                    l.trim_start_matches("//!").strip_prefix(' ').unwrap_or("")
                )
            })
            .collect();
        let cfg = ChecksConfig::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(cfg.enabled_names(), CHECK_NAMES.to_vec());
        assert_eq!(cfg.grouping.header.as_deref(), Some("x-operation-id"));
    }

    #[test]
    fn parses_the_documented_example() {
        let cfg = ChecksConfig::from_yaml(
            r#"{ duplicates: {}, jitter: { min_dispersion: 0.1 },
                 thresholds: { rules: ["p99 < 200ms", "error_rate < 1%"] } }"#,
        )
        .expect("valid");
        assert_eq!(
            cfg.enabled_names(),
            vec!["duplicates", "jitter", "thresholds"]
        );
        assert_eq!(cfg.thresholds.map(|t| t.rules.len()), Some(2));
    }

    #[test]
    fn serializes_back_to_an_equal_config() {
        let cfg = ChecksConfig::default();
        let yaml = serde_norway::to_string(&cfg).expect("serializable");
        assert_eq!(ChecksConfig::from_yaml(&yaml).expect("round trip"), cfg);
    }

    #[test]
    fn unknown_fields_are_rejected_with_path_and_line() {
        let err = ChecksConfig::from_yaml("duplicates:\n  bogus: 1\n").expect_err("unknown field");
        let msg = err.to_string();
        assert!(msg.contains("line 2"), "{msg}");
        assert!(msg.contains("duplicates"), "{msg}");
        assert!(msg.contains("bogus"), "{msg}");
    }

    #[test]
    fn nonsense_numbers_are_rejected_with_their_path() {
        let err = ChecksConfig::from_yaml("retry_after: { by_status: { 503: -1 } }")
            .expect_err("negative");
        assert!(
            err.to_string().contains("retry_after.by_status.503"),
            "{err}"
        );
        let err = ChecksConfig::from_yaml("jitter: { min_dispersion: .nan }").expect_err("NaN");
        assert!(err.to_string().contains("jitter.min_dispersion"), "{err}");
    }
}
