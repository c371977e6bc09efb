//! `rules:` — the fault schedule: rules evaluated in order, the first that matches deciding, each
//! a matcher (`matcher.rs`) and a fault (`faults.rs`); a schedule on its own as `PUT
//! /__harness/schedule` takes it; and the checks of a list of rules, which a file, the control
//! API and the builder all go through.

use serde::Deserialize;
use yaml_config::{from_yaml_str, ConfigError};

use super::faults::{self, DelayFault, DelaySpec, FaultConfig, GrpcAfterHeadersFault, GrpcFault};
use super::matcher::{
    self, check_request_path, GrpcMethodPattern, MatchConfig, PathPattern, Probability,
};
use crate::counts::Counts;

/// A schedule on its own, as `PUT /__harness/schedule` takes it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// The new rules; they replace all the old ones.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

impl ScheduleConfig {
    /// Parses and validates a schedule (YAML or JSON).
    pub fn from_yaml(text: &str, origin: &str) -> Result<ScheduleConfig, ConfigError> {
        let s: ScheduleConfig = from_yaml_str(text, origin)?;
        validate_rules(&s.rules, origin).map_err(|e| e.located(text))?;
        Ok(s)
    }
}

/// One rule of the schedule.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Name reported in the journal and stats; `rule-N` (1-based position) when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// When the rule applies; an absent matcher matches every request.
    #[serde(default, rename = "match")]
    pub matcher: MatchConfig,
    /// What happens to a matching request.
    pub fault: FaultConfig,
}

/// The bounds of one rule's values, as a file or the builder gives them: the failing field
/// (below `rules[i].`) and why.
fn rule_bounds(r: &RuleConfig) -> Result<(), (String, String)> {
    let bad = |field: &str, message: String| Err((field.to_string(), message));
    let m = &r.matcher;
    if let Some(PathPattern(p)) = &m.path {
        if let Err(e) = matcher::bounds::path(p) {
            return bad("match.path", e);
        }
    }
    if let Some(Probability(p)) = m.probability {
        if let Err(e) = matcher::bounds::probability(p) {
            return bad("match.probability", e);
        }
    }
    for (field, counts) in [
        ("requests", &m.requests),
        ("hits", &m.hits),
        ("attempts", &m.attempts),
        ("grpc_attempts", &m.grpc_attempts),
    ] {
        let Some(Counts(specs)) = counts else {
            continue;
        };
        if let Err(e) = matcher::bounds::counts(specs) {
            return bad(&format!("match.{field}"), e.into());
        }
        if let Some(s) = specs.iter().find(|s| !matcher::bounds::count_spec(**s)) {
            return bad(
                &format!("match.{field}"),
                format!("invalid count {s:?} (counts start at 1, and a range's end is not before its start)"),
            );
        }
    }
    if let Some(GrpcMethodPattern(p)) = &m.grpc_method {
        if let Err(e) = matcher::bounds::grpc_method(p) {
            return bad("match.grpc_method", e);
        }
    }
    let checked = match &r.fault {
        FaultConfig::Status(s) => faults::bounds::status_code(i128::from(s.code.0))
            .map(|_| ())
            .map_err(|e| ("fault.status.code", e)),
        FaultConfig::Delay(DelayFault {
            spec: DelaySpec::Uniform(a, b),
            ..
        }) => faults::bounds::uniform_delay(*a, *b).map_err(|e| ("fault.delay.uniform", e.into())),
        FaultConfig::Delay(DelayFault {
            spec: DelaySpec::Lognormal { sigma, .. },
            ..
        }) => faults::bounds::lognormal_sigma(*sigma)
            .map_err(|e| ("fault.delay.lognormal.sigma", e.into())),
        FaultConfig::Grpc(GrpcFault {
            pushback_ms: Some(ms),
            ..
        })
        | FaultConfig::GrpcAfterHeaders(GrpcAfterHeadersFault {
            pushback_ms: Some(ms),
            ..
        }) => faults::bounds::pushback_ms(*ms).map_err(|e| ("fault.grpc.pushback_ms", e)),
        _ => Ok(()),
    };
    checked.or_else(|(field, message)| bad(field, message))
}

/// Every rule's checks, its values' bounds and what needs the whole list (unique ids, sane
/// windows): what a file and the builder's rules both go through.
pub fn validate_rules(rules: &[RuleConfig], origin: &str) -> Result<(), ConfigError> {
    let invalid = |i: usize, field: &str, message: String| ConfigError::Invalid {
        origin: origin.to_string(),
        line: None,
        column: None,
        field: Some(format!("rules[{i}].{field}")),
        message,
    };
    let mut seen = std::collections::HashSet::new();
    for (i, r) in rules.iter().enumerate() {
        rule_bounds(r).map_err(|(field, message)| invalid(i, &field, message))?;
        let id = rule_id(r, i);
        if !seen.insert(id.clone()) {
            return Err(invalid(
                i,
                "id",
                format!("duplicate rule id {id:?}; ids must be unique"),
            ));
        }
        if let (Some(from), Some(until)) = (r.matcher.from, r.matcher.until) {
            if until <= from {
                return Err(invalid(
                    i,
                    "match.until",
                    format!(
                        "`until` ({:?}) must be later than `from` ({:?})",
                        until.0, from.0
                    ),
                ));
            }
        }
        if let Some(m) = &r.matcher.method {
            for name in &m.0 {
                if http::Method::from_bytes(name.to_ascii_uppercase().as_bytes()).is_err() {
                    return Err(invalid(
                        i,
                        "match.method",
                        format!("{name:?} is not an HTTP method"),
                    ));
                }
            }
        }
        if let Some(PathPattern(p)) = &r.matcher.path {
            check_request_path(p).map_err(|m| invalid(i, "match.path", m))?;
        }
        if let Some(p) = &r.matcher.path_prefix {
            check_request_path(p).map_err(|m| invalid(i, "match.path_prefix", m))?;
        }
        for (name, value) in r.matcher.headers.iter() {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(invalid(
                    i,
                    "match.headers",
                    format!("{name:?} is not a header name"),
                ));
            }
            if http::HeaderValue::from_str(value).is_err() {
                return Err(invalid(
                    i,
                    &format!("match.headers.{name}"),
                    format!("{value:?} holds a control character, which no request's header can hold, so it would never match"),
                ));
            }
        }
        if let FaultConfig::Status(s) = &r.fault {
            for (name, value) in &s.headers {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                    || http::HeaderValue::from_str(value).is_err()
                {
                    return Err(invalid(
                        i,
                        "fault.status.headers",
                        format!("{name:?}: {value:?} is not a valid header"),
                    ));
                }
            }
            if s.retry_after.is_some() && s.retry_after_date.is_some() {
                return Err(invalid(
                    i,
                    "fault.status",
                    "give `retry_after` (seconds) or `retry_after_date`, not both".into(),
                ));
            }
        }
    }
    Ok(())
}

/// The position of the first rule that forwards, if any.
pub fn forwarding_rule(rules: &[RuleConfig]) -> Option<usize> {
    rules
        .iter()
        .position(|r| matches!(r.fault, FaultConfig::Forward))
}

/// The id of rule `i` (0-based): its own, or `rule-{i+1}`.
pub fn rule_id(r: &RuleConfig, i: usize) -> String {
    r.id.clone().unwrap_or_else(|| format!("rule-{}", i + 1))
}
