//! The client retry policy as a scenario writes it (`client:`, and a phase's override), and its
//! resolution into [`retry_policy::Policy`] with every duration scaled and bounded. The gRPC
//! fields (`grpc_service_config`, `retryPolicy`, …) are written here too, beside the HTTP ones a
//! phase overrides alike, and resolved for a gRPC call by `grpc.rs`.

use std::path::PathBuf;
use std::time::Duration;

use grpc::service_config::{HedgingPolicyFile, RetryPolicyFile, RetryThrottlingFile};
use retry_policy::grpc::Conduct;

use serde::Deserialize;
use yaml_config::{ConfigError, Dur};

use super::{bounds, invalid, Scale};
use history::ErrorKind;
use retry_policy::{Backoff, BackoffKind, BreakerSpec, BudgetSpec, Jitter, KeyMode, Policy};

/// A client retry policy as written; every field optional so a phase can override a few.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// Attempts per operation, first included (1 = no retries).
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Per-attempt timeout.
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// Budget for all attempts of an operation, backoff included.
    #[serde(default)]
    pub total_timeout: Option<Dur>,
    #[serde(default)]
    /// The wait before each retry, before jitter.
    pub backoff: Option<BackoffFile>,
    #[serde(default)]
    /// How the wait is randomized: `none`, `full`, `equal`, `decorrelated`.
    pub jitter: Option<Jitter>,
    /// Which failures are retried.
    #[serde(default)]
    pub retry_on: Option<RetryOnFile>,
    /// Wait at least the server's Retry-After.
    #[serde(default)]
    pub honor_retry_after: Option<bool>,
    /// The longest Retry-After worth waiting for (default 120 s); a longer one ends the
    /// operation (`wait_too_long`).
    #[serde(default)]
    pub retry_after_max: Option<Dur>,
    /// `per_operation` (correct) or `per_attempt` (the bug).
    #[serde(default)]
    pub key: Option<KeyMode>,
    #[serde(default)]
    /// A retry budget shared by the clients of a phase.
    pub budget: Option<BudgetFile>,
    #[serde(default)]
    /// A circuit breaker shared by the clients of a phase.
    pub breaker: Option<BreakerFile>,
    /// Send `X-Deadline` (absolute unix ms) derived from `total_timeout`.
    #[serde(default)]
    pub deadline_header: Option<bool>,
    /// Send `x-client-id: c<N>` so the journal can group a client's attempts (default true).
    #[serde(default)]
    pub client_id_header: Option<bool>,
    /// gRPC: a service config JSON file (relative to the scenario), as a gRPC client is given
    /// one: its `retryPolicy` or `hedgingPolicy`, `timeout` and `retryThrottling` (gRFC A6).
    #[serde(default)]
    pub grpc_service_config: Option<PathBuf>,
    /// gRPC: `retryPolicy` as in a service config's `methodConfig`, for every method.
    #[serde(default, rename = "retryPolicy")]
    pub retry_policy: Option<RetryPolicyFile>,
    /// gRPC: `hedgingPolicy` as in a service config's `methodConfig`, for every method.
    #[serde(default, rename = "hedgingPolicy")]
    pub hedging_policy: Option<HedgingPolicyFile>,
    /// gRPC: `retryThrottling` as in a service config.
    #[serde(default, rename = "retryThrottling")]
    pub retry_throttling: Option<RetryThrottlingFile>,
    /// gRPC: how the client breaks A6, rule by rule (default: it keeps every rule).
    #[serde(default)]
    pub grpc_conduct: Option<Conduct>,
}

/// Backoff as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackoffFile {
    #[serde(default)]
    /// `fixed`, `linear` or `exponential`.
    pub kind: BackoffKind,
    /// The first wait.
    pub base: Dur,
    #[serde(default)]
    /// The longest wait (default 1 h).
    pub cap: Option<Dur>,
    #[serde(default)]
    /// Growth per retry of an exponential backoff (default 2).
    pub factor: Option<f64>,
}

/// Retry classification as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryOnFile {
    #[serde(default)]
    /// Statuses worth a retry.
    pub statuses: Option<Vec<u16>>,
    #[serde(default)]
    /// Failures without a response worth a retry.
    pub errors: Option<Vec<ErrorKind>>,
}

/// A retry budget as written: `{ ratio: 0.1, reserve: 10 }` or `{ capacity: 10, refill_per_s: 1 }`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetFile {
    #[serde(default)]
    /// Retries allowed per first attempt.
    pub ratio: Option<f64>,
    #[serde(default)]
    /// Retries allowed besides the ratio.
    pub reserve: Option<f64>,
    #[serde(default)]
    /// Tokens of a bucket.
    pub capacity: Option<f64>,
    #[serde(default)]
    /// Tokens added per second.
    pub refill_per_s: Option<f64>,
}

/// A circuit breaker as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerFile {
    #[serde(default = "half")]
    /// Failure ratio over the window that opens the breaker.
    pub failure_ratio: f64,
    #[serde(default = "ten")]
    /// Requests in the window before it may open.
    pub min_requests: u32,
    /// The window failures are counted over.
    pub window: Dur,
    /// How long it stays open.
    pub open_for: Dur,
    #[serde(default = "one")]
    /// Calls let through when half open.
    pub half_open_probes: u32,
    /// Status reported for operations the fallback answered (default 503).
    #[serde(default)]
    pub fallback_status: Option<u16>,
}

fn half() -> f64 {
    0.5
}
fn ten() -> u32 {
    10
}
fn one() -> u32 {
    1
}

/// A phase's policy: its own fields over the scenario's `client`.
pub(super) fn merge_policy(base: &PolicyFile, over: Option<&PolicyFile>) -> PolicyFile {
    let Some(o) = over else { return base.clone() };
    PolicyFile {
        max_attempts: o.max_attempts.or(base.max_attempts),
        timeout: o.timeout.or(base.timeout),
        total_timeout: o.total_timeout.or(base.total_timeout),
        backoff: o.backoff.clone().or_else(|| base.backoff.clone()),
        jitter: o.jitter.or(base.jitter),
        retry_on: o.retry_on.clone().or_else(|| base.retry_on.clone()),
        honor_retry_after: o.honor_retry_after.or(base.honor_retry_after),
        retry_after_max: o.retry_after_max.or(base.retry_after_max),
        key: o.key.or(base.key),
        budget: o.budget.clone().or_else(|| base.budget.clone()),
        breaker: o.breaker.clone().or_else(|| base.breaker.clone()),
        deadline_header: o.deadline_header.or(base.deadline_header),
        client_id_header: o.client_id_header.or(base.client_id_header),
        grpc_service_config: o
            .grpc_service_config
            .clone()
            .or_else(|| base.grpc_service_config.clone()),
        retry_policy: o.retry_policy.clone().or_else(|| base.retry_policy.clone()),
        hedging_policy: o
            .hedging_policy
            .clone()
            .or_else(|| base.hedging_policy.clone()),
        retry_throttling: o
            .retry_throttling
            .clone()
            .or_else(|| base.retry_throttling.clone()),
        grpc_conduct: o.grpc_conduct.or(base.grpc_conduct),
    }
}

/// Resolves a policy, scaling its durations.
pub fn resolve_policy(
    p: &PolicyFile,
    time_scale: f64,
    origin: &str,
    at: &str,
) -> Result<Policy, ConfigError> {
    let scaling = Scale {
        factor: time_scale,
        origin,
    };
    let scale = |d: Duration| scaling.of(d);
    let bounded = |d: Duration, field: &str| {
        scaling.within(
            d,
            format!("{at}.{field}"),
            bounds::DURATION,
            bounds::DURATION_NAME,
        )
    };
    let mut out = Policy {
        retry_after_scale: time_scale,
        ..Policy::default()
    };
    if let Some(n) = p.max_attempts {
        if n == 0 || n > bounds::ATTEMPTS {
            return Err(invalid(
                origin,
                format!("{at}.max_attempts"),
                format!("{n}; give 1 (no retries) to {}", bounds::ATTEMPTS),
            ));
        }
        out.max_attempts = n;
    }
    if let Some(t) = p.timeout {
        if t.0.is_zero() {
            return Err(invalid(
                origin,
                format!("{at}.timeout"),
                "an attempt needs more than 0 to get an answer",
            ));
        }
        out.timeout = bounded(t.0, "timeout")?;
    }
    if p.total_timeout.is_some_and(|t| t.0.is_zero()) {
        return Err(invalid(
            origin,
            format!("{at}.total_timeout"),
            "an operation needs more than 0 to get an answer",
        ));
    }
    out.total_timeout = p
        .total_timeout
        .map(|d| bounded(d.0, "total_timeout"))
        .transpose()?;
    if let Some(b) = &p.backoff {
        let factor = b.factor.unwrap_or(2.0);
        if !(factor.is_finite() && factor >= 1.0) {
            return Err(invalid(
                origin,
                format!("{at}.backoff.factor"),
                "must be a number ≥ 1",
            ));
        }
        out.backoff = Backoff {
            kind: b.kind,
            base: bounded(b.base.0, "backoff.base")?,
            cap: bounded(
                b.cap.map_or(Duration::from_secs(3600), |c| c.0),
                "backoff.cap",
            )?,
            factor,
        };
    } else {
        out.backoff.base = scale(out.backoff.base);
        out.backoff.cap = scale(out.backoff.cap);
    }
    if let Some(j) = p.jitter {
        out.jitter = j;
    }
    if let Some(r) = &p.retry_on {
        if let Some(s) = &r.statuses {
            out.retry_statuses = s.clone();
        }
        if let Some(e) = &r.errors {
            out.retry_errors = e.clone();
        }
    }
    if let Some(h) = p.honor_retry_after {
        out.honor_retry_after = h;
    }
    if let Some(m) = p.retry_after_max {
        out.retry_after_max = m.0;
    }
    if let Some(k) = p.key {
        out.key = k;
    }
    if let Some(b) = &p.budget {
        out.budget = Some(match (b.ratio, b.capacity, b.refill_per_s) {
            (Some(ratio), None, None) if (0.0..=1.0).contains(&ratio) => BudgetSpec::Ratio {
                ratio,
                reserve: b.reserve.unwrap_or(0.0).max(0.0),
            },
            (None, Some(capacity), Some(refill)) if capacity >= 0.0 && refill >= 0.0 => {
                BudgetSpec::TokenBucket {
                    capacity,
                    refill_per_s: refill / time_scale,
                }
            }
            _ => {
                return Err(invalid(
                    origin,
                    format!("{at}.budget"),
                    "give `ratio` (0..1, optional `reserve`) or `capacity` with `refill_per_s`",
                ))
            }
        });
    }
    if let Some(b) = &p.breaker {
        if !(0.0..=1.0).contains(&b.failure_ratio) || b.half_open_probes == 0 {
            return Err(invalid(
                origin,
                format!("{at}.breaker"),
                "`failure_ratio` in 0..1 and `half_open_probes` ≥ 1",
            ));
        }
        out.breaker = Some(BreakerSpec {
            failure_ratio: b.failure_ratio,
            min_requests: b.min_requests,
            window: bounded(b.window.0, "breaker.window")?,
            open_for: bounded(b.open_for.0, "breaker.open_for")?,
            half_open_probes: b.half_open_probes,
        });
        out.fallback_status = b.fallback_status.unwrap_or(503);
    }
    out.deadline_header = p.deadline_header.unwrap_or(false);
    if out.deadline_header && out.total_timeout.is_none() {
        return Err(invalid(
            origin,
            format!("{at}.deadline_header"),
            "needs `total_timeout` (the deadline it carries)",
        ));
    }
    Ok(out)
}
