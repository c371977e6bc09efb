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
//! transient_retried: {}
//! jitter: { min_jitter: 0.08, noise_floor_ms: 7, min_samples: 20 }
//! backoff_growth: { pass_growth: 1.3, min_growth: 1.1, min_samples: 5 }
//! retry_after: { default_s: 1, by_rule: { throttle: 2 } }
//! key_stability: { window_ms: 60000 }
//! circuit_breaker: { min_outage_ms: 5000, require_probe: true }
//! attempts_bound: { max_attempts: 10 }
//! amplification: { bottom_path_prefix: /inventory, max_attempts_per_request: 4 }
//! total_timeout: { budget_ms: 10000 }
//! state_transition: {}
//! thresholds: { rules: ["p99 < 200ms", "error_rate < 1%", "throughput > 500/s"] }
//! grpc_non_retryable: { codes: [INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED] }
//! grpc_pushback: { tolerance_ms: 5 }
//! grpc_committed: {}
//! grpc_attempts: { max_attempts: 5, tolerance_ms: 100 }
//! effects_once: { verify: { url: "/effects/{event_id}", count_field: count } }
//! forged_rejected: {}
//! duplicate_ack: { on_failure: fail }
//! ack_latency: { timeout_ms: 10000 }
//! ordering: { verify_state: { url: "/state/{subject}", field: type } }
//! db_retry: { transient: ["40001", "40P01", "57P01"], min_backoff_ms: 10 }
//! cache_fallback: { expect: answer }
//! ```
//!
//! Each check's fields and defaults are documented with its config struct
//! ([`DuplicatesConfig`], [`JitterConfig`], …).

use serde::{Deserialize, Deserializer, Serialize};
use yaml_config::ConfigError;

use super::ack_latency::AckLatencyConfig;
use super::amplification::AmplificationConfig;
use super::attempts_bound::AttemptsBoundConfig;
use super::backoff_growth::BackoffGrowthConfig;
use super::cache_fallback::CacheFallbackConfig;
use super::circuit_breaker::CircuitBreakerConfig;
use super::db_retry::DbRetryConfig;
use super::duplicate_ack::DuplicateAckConfig;
use super::duplicates::DuplicatesConfig;
use super::effects_once::EffectsOnceConfig;
use super::forged_rejected::ForgedRejectedConfig;
use super::grpc_attempts::GrpcAttemptsConfig;
use super::grpc_committed::GrpcCommittedConfig;
use super::grpc_non_retryable::GrpcNonRetryableConfig;
use super::grpc_pushback::GrpcPushbackConfig;
use super::idempotency_semantics::IdempotencySemanticsConfig;
use super::jitter::JitterConfig;
use super::key_stability::KeyStabilityConfig;
use super::operations::GroupingConfig;
use super::ordering::OrderingConfig;
use super::retry_after::RetryAfterConfig;
use super::retry_on_4xx::RetryOn4xxConfig;
use super::spec::{scale_ms, About, CheckSpec};
use super::state_transition::StateTransitionConfig;
use super::thresholds::ThresholdsConfig;
use super::total_timeout::TotalTimeoutConfig;
use super::transient_retried::TransientRetriedConfig;
use super::{Check, Context};

/// The table of checks: each line is a check's YAML key and its configuration type, in the order
/// results are reported. Everything else about a check is in its module's [`CheckSpec`].
macro_rules! check_table {
    ($($(#[$doc:meta])* $field:ident: $config:ty,)*) => {
        /// Stable identifiers of every check, in the order results are reported.
        pub const CHECK_NAMES: [&str; [$(stringify!($field)),*].len()] =
            [$(<$config as CheckSpec>::NAME),*];

        /// The checks to run and their configurations; an absent check does not run.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct ChecksConfig {
            /// How requests are grouped into operations (shared by every check).
            #[serde(default)]
            pub grouping: GroupingConfig,
            /// Most pieces of evidence one check reports (the total count is always in its
            /// metrics).
            #[serde(default = "default_max_evidence")]
            pub max_evidence: usize,
            $(
                $(#[$doc])*
                #[serde(default, deserialize_with = "enabled", skip_serializing_if = "Option::is_none")]
                pub $field: Option<$config>,
            )*
        }

        impl Default for ChecksConfig {
            /// Every check, with its default thresholds.
            fn default() -> Self {
                ChecksConfig {
                    grouping: GroupingConfig::default(),
                    max_evidence: default_max_evidence(),
                    $($field: Some(<$config>::default()),)*
                }
            }
        }

        impl ChecksConfig {
            /// No check at all (enable them one by one).
            pub fn none() -> Self {
                ChecksConfig {
                    grouping: GroupingConfig::default(),
                    max_evidence: default_max_evidence(),
                    $($field: None,)*
                }
            }

            /// The enabled checks, in the order of [`CHECK_NAMES`].
            pub(crate) fn build(&self) -> Vec<Box<dyn Check>> {
                let ctx = self.context();
                let mut checks: Vec<Box<dyn Check>> = Vec::new();
                $(if let Some(c) = &self.$field {
                    checks.push(c.build(ctx));
                })*
                checks
            }

            /// Names of the enabled checks, in report order.
            pub fn enabled_names(&self) -> Vec<&'static str> {
                let mut names = Vec::new();
                $(if self.$field.is_some() {
                    names.push(<$config as CheckSpec>::NAME);
                })*
                names
            }

            /// Multiplies every setting that describes the scenario's own time by `f` (see
            /// [`CheckSpec::scale`]).
            pub fn scale(&mut self, f: f64) {
                if f == 1.0 {
                    return;
                }
                scale_ms(&mut self.grouping.fingerprint_window_ms, f);
                scale_ms(&mut self.grouping.horizon_ms, f);
                $(if let Some(c) = &mut self.$field {
                    c.scale(f);
                })*
            }

            /// Checks the bounds serde cannot; `at` is where this configuration sits in its file
            /// (`checks` in a scenario, empty in a checks file).
            pub fn validate(&self, origin: &str, at: &str) -> Result<(), ConfigError> {
                let field = |rest: &str| {
                    if at.is_empty() { rest.to_string() } else { format!("{at}.{rest}") }
                };
                if self.grouping.horizon_ms == 0 {
                    return Err(ConfigError::at(
                        origin,
                        field("grouping.horizon_ms"),
                        "expected a horizon above 0 ms",
                    ));
                }
                $(if let Some(c) = &self.$field {
                    c.validate().map_err(|e| {
                        ConfigError::at(
                            origin,
                            field(&format!("{}.{}", stringify!($field), e.field)),
                            e.message,
                        )
                    })?;
                })*
                Ok(())
            }

            /// Every check's README row, in report order.
            pub fn about() -> Vec<(&'static str, About)> {
                vec![$((<$config as CheckSpec>::NAME, <$config as CheckSpec>::ABOUT)),*]
            }
        }
    };
}

check_table! {
    /// More than one resource created for one Idempotency-Key.
    duplicates: DuplicatesConfig,
    /// The Idempotency-Key protocol: one 201, replays, 409 in flight, 422 on a different body.
    idempotency_semantics: IdempotencySemanticsConfig,
    /// A retry after a 4xx that must not be retried (400, 401, 403, 404, 422).
    retry_on_4xx: RetryOn4xxConfig,
    /// An operation whose first attempt failed transiently (503, no answer) never tried again.
    transient_retried: TransientRetriedConfig,
    /// Retry delays of operations that failed together: no jitter, too little, or none at all.
    jitter: JitterConfig,
    /// Waits between retries that do not grow (a fixed delay, or none).
    backoff_growth: BackoffGrowthConfig,
    /// A retry earlier than the Retry-After it was given.
    retry_after: RetryAfterConfig,
    /// The same client and body retried under a new Idempotency-Key.
    key_stability: KeyStabilityConfig,
    /// A client whose attempt rate does not fall during a sustained outage.
    circuit_breaker: CircuitBreakerConfig,
    /// An operation with more attempts than a retry policy should ever make.
    attempts_bound: AttemptsBoundConfig,
    /// Bottom attempts per top request, above a threshold.
    amplification: AmplificationConfig,
    /// An operation over its time budget, or a request received after its x-deadline.
    total_timeout: TotalTimeoutConfig,
    /// A resource that made the same state transition twice (a double payment).
    state_transition: StateTransitionConfig,
    /// Latency, error-rate and throughput rules such as `p99 < 200ms`.
    thresholds: ThresholdsConfig,
    /// A gRPC call retried after a status retrying cannot fix (INVALID_ARGUMENT, NOT_FOUND, …).
    grpc_non_retryable: GrpcNonRetryableConfig,
    /// A gRPC retry sooner than the server's `grpc-retry-pushback-ms`, or after a negative one.
    grpc_pushback: GrpcPushbackConfig,
    /// A gRPC call retried after it was committed (its answer's headers had come).
    grpc_committed: GrpcCommittedConfig,
    /// A gRPC call's attempts: at most 5, `grpc-previous-rpc-attempts` counting up, one deadline.
    grpc_attempts: GrpcAttemptsConfig,
    /// A webhook event that took more or less than one effect at the consumer.
    effects_once: EffectsOnceConfig,
    /// A forged, stale or replayed webhook delivery accepted or acted on.
    forged_rejected: ForgedRejectedConfig,
    /// A redelivery of a processed webhook event answered anything but 2xx.
    duplicate_ack: DuplicateAckConfig,
    /// A webhook delivery acknowledged later than the provider's timeout, or not at all.
    ack_latency: AckLatencyConfig,
    /// A subject delivered out of order that ended in the wrong state.
    ordering: OrderingConfig,
    /// A database transaction retried wrongly: only its failed statement, at once, not at all,
    /// or after an error retrying cannot fix.
    db_retry: DbRetryConfig,
    /// A service that fails its client when its cache fails (or serves when it should fail).
    cache_fallback: CacheFallbackConfig,
}

fn default_max_evidence() -> usize {
    crate::DEFAULT_MAX_EVIDENCE
}

/// A present key enables its check, even with no value (`duplicates:` reads as `duplicates: {}`).
fn enabled<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

impl ChecksConfig {
    /// What every check built from this configuration shares.
    pub(crate) fn context(&self) -> Context {
        Context::new(&self.grouping, self.max_evidence)
    }

    /// Parses and validates a checks document (the `checks:` section of a scenario, on its own);
    /// `origin` names it in errors, which carry the line and column of the field at fault.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let cfg: ChecksConfig = yaml_config::from_yaml_str(text, origin)?;
        cfg.validate(origin, "").map_err(|e| e.located(text))?;
        Ok(cfg)
    }

    /// [`ChecksConfig::parse`] of text that has no file name (errors say `checks`).
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        ChecksConfig::parse(text, "checks")
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
    fn every_field_is_named_as_its_check() {
        let yaml = serde_norway::to_string(&ChecksConfig::default()).expect("serializable");
        for name in CHECK_NAMES {
            assert!(yaml.contains(&format!("\n{name}:")), "{name} in\n{yaml}");
        }
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
            r#"{ duplicates: {}, jitter: { min_jitter: 0.1 },
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
        assert!(msg.starts_with("checks:2:"), "{msg}");
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
        let err = ChecksConfig::from_yaml("jitter: { min_jitter: .nan }").expect_err("NaN");
        assert!(err.to_string().contains("jitter.min_jitter"), "{err}");
    }
}
