//! `clients`: the closed model — the YAML and its resolver.

use std::time::Duration;

use serde::Deserialize;
use yaml_config::{ConfigError, Dur};

use super::{bounds, invalid, PhaseScope};
use crate::plan::PhaseKind;

/// `clients`: closed model.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientsFile {
    /// Clients.
    pub concurrency: u32,
    #[serde(default)]
    /// How long.
    pub duration: Option<Dur>,
    #[serde(default)]
    /// Operations in all.
    pub requests: Option<u64>,
    #[serde(default)]
    /// Pause between a client's operations.
    pub think: Option<Dur>,
}

/// Resolves a `clients` phase: its numbers held to their bounds, its durations scaled.
pub(super) fn resolve(c: &ClientsFile, scope: &PhaseScope<'_>) -> Result<PhaseKind, ConfigError> {
    if c.duration.is_none() && c.requests.is_none() {
        return Err(invalid(
            scope.origin,
            scope.at("clients"),
            "this phase never ends: give `duration` or `requests`",
        ));
    }
    if c.concurrency == 0 || c.concurrency > bounds::WORKERS {
        return Err(invalid(
            scope.origin,
            scope.at("clients.concurrency"),
            format!("{}; give 1 to {}", c.concurrency, bounds::WORKERS),
        ));
    }
    if c.requests.is_some_and(|n| n == 0 || n > bounds::OPERATIONS) {
        return Err(invalid(
            scope.origin,
            scope.at("clients.requests"),
            format!("give 1 to {}", bounds::OPERATIONS),
        ));
    }
    if c.duration.is_some_and(|d| d.0.is_zero()) {
        return Err(invalid(
            scope.origin,
            scope.at("clients.duration"),
            format!("0; give more than 0, at most {}", bounds::PHASE_NAME),
        ));
    }
    Ok(PhaseKind::Clients {
        concurrency: c.concurrency,
        duration: c
            .duration
            .map(|d| scope.pause(d.0, scope.at("clients.duration")))
            .transpose()?,
        requests: c.requests,
        think: scope.pause(
            c.think.map_or(Duration::ZERO, |d| d.0),
            scope.at("clients.think"),
        )?,
    })
}
