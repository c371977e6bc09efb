//! `fleet`: clients that start together, each running operations under the retry policy — the
//! YAML and its resolver.

use serde::Deserialize;
use yaml_config::ConfigError;

use super::{bounds, invalid, PhaseScope};
use crate::plan::PhaseKind;

/// `fleet`: N clients that start together, each running operations under the retry policy.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetFile {
    /// Clients.
    pub clients: u32,
    /// Operations per client, one after another.
    #[serde(default = "one_u64")]
    pub operations: u64,
}

fn one_u64() -> u64 {
    1
}

/// Resolves a `fleet` phase: its numbers held to their bounds, its durations scaled.
pub(super) fn resolve(fl: &FleetFile, scope: &PhaseScope<'_>) -> Result<PhaseKind, ConfigError> {
    if fl.clients == 0 || fl.clients > bounds::WORKERS {
        return Err(invalid(
            scope.origin,
            scope.at("fleet.clients"),
            format!("{}; give 1 to {}", fl.clients, bounds::WORKERS),
        ));
    }
    if fl.operations == 0
        || u64::from(fl.clients).saturating_mul(fl.operations) > bounds::OPERATIONS
    {
        return Err(invalid(
            scope.origin,
            scope.at("fleet.operations"),
            format!(
                "give at least 1, and at most {} operations for the whole fleet",
                bounds::OPERATIONS
            ),
        ));
    }
    Ok(PhaseKind::Fleet {
        clients: fl.clients,
        operations: fl.operations,
    })
}
