//! The gRPC service config as users write it (`methodConfig` with `retryPolicy` or
//! `hedgingPolicy` and `timeout`, and `retryThrottling`), read from JSON — or from the same fields
//! in YAML, through the serde types — and validated as gRFC A6 says, into the retry policy's
//! types.
//!
//! Why two layers: the file's fields ([`ServiceConfigFile`]) are what serde reads, from either
//! language, with its line and column; [`ServiceConfigFile::resolve`] then checks what serde
//! cannot (A6's rules) and names the JSON path of the first field that breaks one, so the
//! scenario loader can point at it. Fields the harness does not use (`loadBalancingConfig`,
//! `waitForReady`, …) are accepted and ignored, as a real service config has them.

use std::time::Duration;

use history::GrpcCode;
use retry_policy::grpc::{HedgingPolicy, RetryPolicy, Strategy, ThrottleSpec};
use serde::Deserialize;

/// A service config that breaks a rule, with the JSON path of the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("service config: {path}: {message}")]
pub struct ConfigError {
    /// Where: `methodConfig[0].retryPolicy.maxAttempts`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    fn at(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A service config's fields as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceConfigFile {
    /// Per-method settings.
    #[serde(default)]
    pub method_config: Vec<MethodConfigFile>,
    /// Retry throttling, per server.
    #[serde(default)]
    pub retry_throttling: Option<RetryThrottlingFile>,
}

/// One `methodConfig` entry as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodConfigFile {
    /// The methods it applies to.
    #[serde(default)]
    pub name: Vec<NameFile>,
    /// The retry policy.
    #[serde(default)]
    pub retry_policy: Option<RetryPolicyFile>,
    /// The hedging policy.
    #[serde(default)]
    pub hedging_policy: Option<HedgingPolicyFile>,
    /// The call's default deadline, a protobuf JSON duration.
    #[serde(default)]
    pub timeout: Option<String>,
}

/// A `name` entry: `{service, method}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NameFile {
    /// `pkg.Service`; empty or absent for every service.
    #[serde(default)]
    pub service: Option<String>,
    /// The method; empty or absent for every method of the service.
    #[serde(default)]
    pub method: Option<String>,
}

/// `retryPolicy` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicyFile {
    /// `maxAttempts`.
    pub max_attempts: Option<serde_json::Number>,
    /// `initialBackoff`, e.g. `"0.1s"`.
    pub initial_backoff: Option<String>,
    /// `maxBackoff`.
    pub max_backoff: Option<String>,
    /// `backoffMultiplier`.
    pub backoff_multiplier: Option<f64>,
    /// `retryableStatusCodes`: names (any case) or numbers.
    pub retryable_status_codes: Option<Vec<GrpcCode>>,
    /// `perAttemptRecvTimeout` (a later addition to A6): read so that a service config that
    /// has it loads, but not applied — an attempt is bounded by the call's deadline only.
    pub per_attempt_recv_timeout: Option<String>,
}

/// `hedgingPolicy` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HedgingPolicyFile {
    /// `maxAttempts`.
    pub max_attempts: Option<serde_json::Number>,
    /// `hedgingDelay`; absent means `0s`.
    pub hedging_delay: Option<String>,
    /// `nonFatalStatusCodes`; absent means none.
    pub non_fatal_status_codes: Option<Vec<GrpcCode>>,
}

/// `retryThrottling` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryThrottlingFile {
    /// `maxTokens`.
    pub max_tokens: Option<serde_json::Number>,
    /// `tokenRatio`.
    pub token_ratio: Option<f64>,
}

/// A validated service config.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceConfig {
    methods: Vec<(MethodName, MethodConfig)>,
    /// Retry throttling, when configured.
    pub throttling: Option<ThrottleSpec>,
}

/// Which methods a config entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum MethodName {
    /// Every method of every service (`{}`).
    Default,
    /// Every method of one service.
    Service(String),
    /// One method.
    Method(String, String),
}

/// What the config says for one method.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MethodConfig {
    /// Retry, hedging or neither.
    pub strategy: Strategy,
    /// The default deadline.
    pub timeout: Option<Duration>,
}

impl ServiceConfig {
    /// Reads and validates a service config JSON document.
    pub fn from_json(text: &str) -> Result<ServiceConfig, ConfigError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let file: ServiceConfigFile = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            ConfigError::at(path, e.into_inner().to_string())
        })?;
        de.end().map_err(|e| ConfigError::at(".", e.to_string()))?;
        file.resolve()
    }

    /// The config of `pkg.Service/Method` by the spec's precedence: the entry that names the
    /// method, else the one that names its service, else the default (`{}`), else none.
    pub fn method(&self, service: &str, method: &str) -> MethodConfig {
        let find = |want: &MethodName| {
            self.methods
                .iter()
                .find(|(n, _)| n == want)
                .map(|(_, c)| c.clone())
        };
        find(&MethodName::Method(service.to_string(), method.to_string()))
            .or_else(|| find(&MethodName::Service(service.to_string())))
            .or_else(|| find(&MethodName::Default))
            .unwrap_or_default()
    }

    /// The config of a `/pkg.Service/Method` path (or `pkg.Service/Method`).
    pub fn for_path(&self, path: &str) -> MethodConfig {
        let p = path.strip_prefix('/').unwrap_or(path);
        let (service, method) = p.split_once('/').unwrap_or((p, ""));
        self.method(service, method)
    }
}

impl ServiceConfigFile {
    /// Checks A6's rules and resolves the durations, truncations and caps.
    pub fn resolve(&self) -> Result<ServiceConfig, ConfigError> {
        let mut methods: Vec<(MethodName, MethodConfig)> = Vec::new();
        for (i, mc) in self.method_config.iter().enumerate() {
            let at = format!("methodConfig[{i}]");
            let strategy = match (&mc.retry_policy, &mc.hedging_policy) {
                (Some(_), Some(_)) => {
                    return Err(ConfigError::at(
                        at,
                        "retryPolicy and hedgingPolicy are both set; a method has one or the other (gRFC A6)",
                    ))
                }
                (Some(r), None) => Strategy::Retry(r.resolve(&format!("{at}.retryPolicy"))?),
                (None, Some(h)) => Strategy::Hedging(h.resolve(&format!("{at}.hedgingPolicy"))?),
                (None, None) => Strategy::Single,
            };
            let timeout = match &mc.timeout {
                Some(t) => Some(
                    parse_duration(t).map_err(|m| ConfigError::at(format!("{at}.timeout"), m))?,
                ),
                None => None,
            };
            let config = MethodConfig { strategy, timeout };
            for (j, n) in mc.name.iter().enumerate() {
                let here = format!("{at}.name[{j}]");
                let service = n.service.as_deref().unwrap_or("");
                let method = n.method.as_deref().unwrap_or("");
                let name = match (service.is_empty(), method.is_empty()) {
                    (true, true) => MethodName::Default,
                    (true, false) => {
                        return Err(ConfigError::at(
                            here,
                            format!("method {method:?} without a service; name the service too"),
                        ))
                    }
                    (false, true) => MethodName::Service(service.to_string()),
                    (false, false) => MethodName::Method(service.to_string(), method.to_string()),
                };
                if methods.iter().any(|(m, _)| *m == name) {
                    return Err(ConfigError::at(
                        here,
                        "this name appears in an earlier methodConfig entry too",
                    ));
                }
                methods.push((name, config.clone()));
            }
        }
        let throttling = match &self.retry_throttling {
            Some(t) => Some(t.resolve("retryThrottling")?),
            None => None,
        };
        Ok(ServiceConfig {
            methods,
            throttling,
        })
    }
}

/// `maxAttempts`: "MUST be a JSON integer value greater than 1".
fn max_attempts(n: &Option<serde_json::Number>, at: &str) -> Result<u32, ConfigError> {
    let path = format!("{at}.maxAttempts");
    let n = n.as_ref().ok_or_else(|| {
        ConfigError::at(
            &path,
            "required: the attempts in all, the first included (2 to 5)",
        )
    })?;
    let v = n
        .as_u64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f.min(u64::MAX as f64) as u64)
        })
        .ok_or_else(|| ConfigError::at(&path, format!("{n} is not a whole number")))?;
    if v < 2 {
        return Err(ConfigError::at(&path, format!("{v}: must be 2 or more")));
    }
    // "Values greater than 5 are treated as 5 without being considered a validation error":
    // the value is kept, and the client's conduct applies the cap.
    Ok(u32::try_from(v).unwrap_or(u32::MAX))
}

impl RetryPolicyFile {
    /// Checks A6's rules; errors name fields under `at` (the path of this policy).
    pub fn resolve(&self, at: &str) -> Result<RetryPolicy, ConfigError> {
        let max_attempts = max_attempts(&self.max_attempts, at)?;
        let positive = |v: &Option<String>, field: &str| -> Result<Duration, ConfigError> {
            let path = format!("{at}.{field}");
            let s = v
                .as_ref()
                .ok_or_else(|| ConfigError::at(&path, "required: a duration such as \"0.1s\""))?;
            let d = parse_duration(s).map_err(|m| ConfigError::at(&path, m))?;
            if d.is_zero() {
                return Err(ConfigError::at(&path, "must be greater than 0"));
            }
            Ok(d)
        };
        let initial_backoff = positive(&self.initial_backoff, "initialBackoff")?;
        let max_backoff = positive(&self.max_backoff, "maxBackoff")?;
        let backoff_multiplier = match self.backoff_multiplier {
            Some(m) if m > 0.0 && m.is_finite() => m,
            Some(m) => {
                return Err(ConfigError::at(
                    format!("{at}.backoffMultiplier"),
                    format!("{m}: must be greater than 0"),
                ))
            }
            None => {
                return Err(ConfigError::at(
                    format!("{at}.backoffMultiplier"),
                    "required: a number greater than 0",
                ))
            }
        };
        let retryable_status_codes = match &self.retryable_status_codes {
            Some(c) if !c.is_empty() => dedup(c),
            _ => {
                return Err(ConfigError::at(
                    format!("{at}.retryableStatusCodes"),
                    "required and non-empty, e.g. [\"UNAVAILABLE\"]",
                ))
            }
        };
        Ok(RetryPolicy {
            max_attempts,
            initial_backoff,
            max_backoff,
            backoff_multiplier,
            retryable_status_codes,
        })
    }
}

impl HedgingPolicyFile {
    /// Checks A6's rules; errors name fields under `at`.
    pub fn resolve(&self, at: &str) -> Result<HedgingPolicy, ConfigError> {
        let max_attempts = max_attempts(&self.max_attempts, at)?;
        let hedging_delay = match &self.hedging_delay {
            Some(s) => {
                parse_duration(s).map_err(|m| ConfigError::at(format!("{at}.hedgingDelay"), m))?
            }
            None => Duration::ZERO,
        };
        Ok(HedgingPolicy {
            max_attempts,
            hedging_delay,
            non_fatal_status_codes: self
                .non_fatal_status_codes
                .as_deref()
                .map(dedup)
                .unwrap_or_default(),
        })
    }
}

impl RetryThrottlingFile {
    /// Checks A6's rules; errors name fields under `at`.
    pub fn resolve(&self, at: &str) -> Result<ThrottleSpec, ConfigError> {
        let path = format!("{at}.maxTokens");
        let n = self
            .max_tokens
            .as_ref()
            .ok_or_else(|| ConfigError::at(&path, "required: an integer in (0, 1000]"))?;
        let max_tokens = n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .filter(|v| (1..=1000).contains(v))
            .ok_or_else(|| {
                ConfigError::at(&path, format!("{n}: must be an integer in (0, 1000]"))
            })?;
        let path = format!("{at}.tokenRatio");
        let ratio = self
            .token_ratio
            .ok_or_else(|| ConfigError::at(&path, "required: a number greater than 0, e.g. 0.1"))?;
        // "Decimal places beyond 3 are ignored. (eg. 0.5466 is treated as 0.546.)"
        let milli = (ratio * 1000.0 + 1e-9).floor();
        if !(ratio > 0.0 && milli.is_finite() && milli >= 1.0) {
            return Err(ConfigError::at(
                &path,
                format!("{ratio}: must be greater than 0 (and at least 0.001: decimals past 3 are ignored)"),
            ));
        }
        Ok(ThrottleSpec {
            max_tokens: max_tokens as u32,
            token_ratio_milli: milli.min(f64::from(u32::MAX)) as u32,
        })
    }
}

fn dedup(codes: &[GrpcCode]) -> Vec<GrpcCode> {
    let mut out = codes.to_vec();
    out.sort();
    out.dedup();
    out
}

/// A protobuf JSON duration: decimal seconds with up to 9 fractional digits and an `s`
/// (`"0.1s"`, `"1.500s"`, `"3s"`); negative durations are refused, as no field here takes one.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("{s:?} is not a protobuf JSON duration such as \"0.1s\": {why}");
    let body = s
        .strip_suffix('s')
        .ok_or_else(|| bad("it must end in 's'"))?;
    if body.starts_with('-') {
        return Err(bad("negative"));
    }
    let (whole, frac) = body.split_once('.').unwrap_or((body, ""));
    if whole.is_empty() && frac.is_empty() {
        return Err(bad("no digits"));
    }
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("only digits and one '.' may come before 's'"));
    }
    if frac.len() > 9 {
        return Err(bad("at most 9 fractional digits"));
    }
    // The protobuf Duration's range: ±315,576,000,000 s.
    let secs: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad("too large"))?
    };
    if secs > 315_576_000_000 {
        return Err(bad("beyond the protobuf Duration's 315576000000 s"));
    }
    let nanos: u32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}")
            .parse()
            .map_err(|_| bad("bad fraction"))?
    };
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use GrpcCode::{Internal, ResourceExhausted, Unavailable};

    const A6_EXAMPLE: &str = r#"{
      "loadBalancingPolicy": "round_robin",
      "methodConfig": [
        {
          "name": [{"service": "orders.v1.Orders", "method": "CreateOrder"}],
          "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.5s", "nonFatalStatusCodes": ["UNAVAILABLE", 13]}
        },
        {
          "name": [{"service": "orders.v1.Orders"}],
          "waitForReady": true,
          "timeout": "2.5s",
          "retryPolicy": {
            "maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "resource_exhausted", 14]
          }
        },
        {"name": [{}], "timeout": "10s"}
      ],
      "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
    }"#;

    #[test]
    fn reads_a6s_example_and_matches_by_precedence() {
        let c = ServiceConfig::from_json(A6_EXAMPLE).unwrap();
        let create = c.method("orders.v1.Orders", "CreateOrder");
        let Strategy::Hedging(h) = &create.strategy else {
            panic!("{create:?}")
        };
        assert_eq!(h.max_attempts, 3);
        assert_eq!(h.hedging_delay, Duration::from_millis(500));
        assert_eq!(h.non_fatal_status_codes, [Internal, Unavailable]);
        let get = c.for_path("/orders.v1.Orders/GetOrder");
        let Strategy::Retry(r) = &get.strategy else {
            panic!("{get:?}")
        };
        assert_eq!(
            *r,
            RetryPolicy {
                max_attempts: 4,
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                backoff_multiplier: 2.0,
                retryable_status_codes: vec![ResourceExhausted, Unavailable],
            }
        );
        assert_eq!(get.timeout, Some(Duration::from_millis(2500)));
        let other = c.method("billing.v1.Billing", "Pay");
        assert_eq!(other.strategy, Strategy::Single);
        assert_eq!(other.timeout, Some(Duration::from_secs(10)));
        assert_eq!(
            c.throttling,
            Some(ThrottleSpec {
                max_tokens: 10,
                token_ratio_milli: 100
            })
        );
        let none = ServiceConfig::from_json("{}").unwrap();
        assert_eq!(none.method("a.B", "C"), MethodConfig::default());
    }

    fn error(json: &str) -> ConfigError {
        ServiceConfig::from_json(json).expect_err(json)
    }

    fn retry_with(field: &str) -> String {
        let mut v: serde_json::Value = serde_json::from_str(
            r#"{"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
                "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}"#,
        )
        .unwrap();
        let patch: serde_json::Value = serde_json::from_str(field).unwrap();
        for (k, x) in patch.as_object().unwrap() {
            if x.is_null() {
                v.as_object_mut().unwrap().remove(k);
            } else {
                v[k] = x.clone();
            }
        }
        format!(r#"{{"methodConfig": [{{"name": [{{"service": "s.S"}}], "retryPolicy": {v}}}]}}"#)
    }

    #[test]
    fn a6s_rules_are_enforced_with_the_field_path() {
        let p = "methodConfig[0].retryPolicy";
        let cases = [
            (r#"{"maxAttempts": 1}"#, "maxAttempts", "2 or more"),
            (r#"{"maxAttempts": null}"#, "maxAttempts", "required"),
            (r#"{"maxAttempts": 2.5}"#, "maxAttempts", "whole number"),
            (
                r#"{"initialBackoff": "0s"}"#,
                "initialBackoff",
                "greater than 0",
            ),
            (
                r#"{"initialBackoff": "100ms"}"#,
                "initialBackoff",
                "protobuf JSON duration",
            ),
            (r#"{"maxBackoff": null}"#, "maxBackoff", "required"),
            (
                r#"{"backoffMultiplier": 0}"#,
                "backoffMultiplier",
                "greater than 0",
            ),
            (
                r#"{"backoffMultiplier": null}"#,
                "backoffMultiplier",
                "required",
            ),
            (
                r#"{"retryableStatusCodes": []}"#,
                "retryableStatusCodes",
                "non-empty",
            ),
            (
                r#"{"retryableStatusCodes": null}"#,
                "retryableStatusCodes",
                "non-empty",
            ),
        ];
        for (patch, field, says) in cases {
            let e = error(&retry_with(patch));
            assert_eq!(e.path, format!("{p}.{field}"), "{patch}: {e}");
            assert!(e.message.contains(says), "{patch}: {e}");
        }
        // A code that is no code fails in serde, with its path too.
        let e = error(&retry_with(
            r#"{"retryableStatusCodes": ["UNAVAILABLE", "NOPE"]}"#,
        ));
        assert_eq!(e.path, format!("{p}.retryableStatusCodes[1]"), "{e}");
        assert!(e.message.contains("NOPE"), "{e}");
        let e = error(&retry_with(r#"{"retryableStatusCodes": [17]}"#));
        assert!(e.message.contains("17"), "{e}");
    }

    #[test]
    fn more_than_five_attempts_is_kept_for_the_client_to_cap() {
        let c = ServiceConfig::from_json(&retry_with(r#"{"maxAttempts": 9}"#)).unwrap();
        let Strategy::Retry(r) = c.method("s.S", "M").strategy else {
            panic!()
        };
        assert_eq!(
            r.max_attempts, 9,
            "A6: treated as 5 by the client, not an error"
        );
    }

    #[test]
    fn retry_and_hedging_are_exclusive_and_names_are_checked() {
        let e = error(
            r#"{"methodConfig": [{"name": [{"service": "s.S"}],
                "retryPolicy": {}, "hedgingPolicy": {}}]}"#,
        );
        assert_eq!(e.path, "methodConfig[0]");
        assert!(e.message.contains("one or the other"), "{e}");
        let e = error(r#"{"methodConfig": [{"name": [{"method": "M"}]}]}"#);
        assert_eq!(e.path, "methodConfig[0].name[0]");
        let e = error(
            r#"{"methodConfig": [{"name": [{"service": "s.S"}]}, {"name": [{"service": "t.T"}, {"service": "s.S", "method": ""}]}]}"#,
        );
        assert_eq!(e.path, "methodConfig[1].name[1]");
        assert!(e.message.contains("earlier"), "{e}");
    }

    #[test]
    fn hedging_fields_are_optional_but_checked() {
        let c = ServiceConfig::from_json(
            r#"{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2}}]}"#,
        )
        .unwrap();
        let Strategy::Hedging(h) = c.method("a.B", "C").strategy else {
            panic!()
        };
        assert_eq!(
            (h.hedging_delay, h.non_fatal_status_codes.len()),
            (Duration::ZERO, 0)
        );
        let e = error(
            r#"{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "soon"}}]}"#,
        );
        assert_eq!(e.path, "methodConfig[0].hedgingPolicy.hedgingDelay");
        let e = error(r#"{"methodConfig": [{"name": [{}], "hedgingPolicy": {}}]}"#);
        assert_eq!(e.path, "methodConfig[0].hedgingPolicy.maxAttempts");
    }

    #[test]
    fn throttling_is_bounded_and_its_ratio_truncated_to_thousandths() {
        let t = |json: &str| ServiceConfig::from_json(&format!(r#"{{"retryThrottling": {json}}}"#));
        let spec = t(r#"{"maxTokens": 1000, "tokenRatio": 0.5466}"#)
            .unwrap()
            .throttling
            .unwrap();
        assert_eq!(
            spec,
            ThrottleSpec {
                max_tokens: 1000,
                token_ratio_milli: 546
            }
        );
        let spec = t(r#"{"maxTokens": 3, "tokenRatio": 0.1}"#)
            .unwrap()
            .throttling
            .unwrap();
        assert_eq!(spec.token_ratio_milli, 100);
        for (bad, field) in [
            (r#"{"maxTokens": 0, "tokenRatio": 0.1}"#, "maxTokens"),
            (r#"{"maxTokens": 1001, "tokenRatio": 0.1}"#, "maxTokens"),
            (r#"{"maxTokens": 1.5, "tokenRatio": 0.1}"#, "maxTokens"),
            (r#"{"tokenRatio": 0.1}"#, "maxTokens"),
            (r#"{"maxTokens": 10, "tokenRatio": 0}"#, "tokenRatio"),
            (r#"{"maxTokens": 10, "tokenRatio": -1}"#, "tokenRatio"),
            (r#"{"maxTokens": 10, "tokenRatio": 0.0004}"#, "tokenRatio"),
            (r#"{"maxTokens": 10}"#, "tokenRatio"),
        ] {
            let e = t(bad).expect_err(bad);
            assert_eq!(e.path, format!("retryThrottling.{field}"), "{bad}: {e}");
        }
    }

    #[test]
    fn not_json_or_wrong_types_name_the_place() {
        let e = error(r#"{"methodConfig": [{"name": "orders"}]}"#);
        assert_eq!(e.path, "methodConfig[0].name", "{e}");
        let e = error(r#"{"methodConfig": [}"#);
        assert!(!e.message.is_empty());
        let e = error(r#"{} {}"#);
        assert!(e.message.contains("trailing"), "{e}");
    }

    #[test]
    fn durations_as_protobuf_json_writes_them() {
        for (s, d) in [
            ("0.1s", Duration::from_millis(100)),
            (".5s", Duration::from_millis(500)),
            ("3s", Duration::from_secs(3)),
            ("1.000000001s", Duration::new(1, 1)),
            ("0s", Duration::ZERO),
            ("2.s", Duration::from_secs(2)),
        ] {
            assert_eq!(parse_duration(s), Ok(d), "{s}");
        }
        for bad in [
            "",
            "s",
            ".s",
            "1",
            "1ms",
            "-1s",
            "1.0000000001s",
            "1e3s",
            "1,5s",
            " 1s",
            "315576000001s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_same_fields_read_from_yaml_shaped_values() {
        // The scenario loader reads YAML into these types; any self-describing format will do.
        let v = serde_json::json!({
            "retryPolicy": {
                "maxAttempts": 3, "initialBackoff": "0.2s", "maxBackoff": "2s",
                "backoffMultiplier": 1.5, "retryableStatusCodes": ["unavailable"]
            }
        });
        let mc: MethodConfigFile = serde_json::from_value(v).unwrap();
        let r = mc
            .retry_policy
            .unwrap()
            .resolve("client.retryPolicy")
            .unwrap();
        assert_eq!(r.retryable_status_codes, [Unavailable]);
    }
}
