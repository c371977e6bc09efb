//! `burst`: N requests released together, R rounds — the YAML and its resolver.

use std::time::Duration;

use serde::Deserialize;
use yaml_config::{ConfigError, Dur};

use super::{bounds, invalid, PhaseScope};
use crate::plan::{PhaseKind, SyncMode};

/// `burst`: N requests released together on connections opened beforehand, R rounds.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BurstFile {
    #[serde(default = "ten")]
    /// Requests per round (default 10).
    pub size: u32,
    #[serde(default = "one")]
    /// Rounds (default 1).
    pub rounds: u32,
    /// Pause between rounds.
    #[serde(default)]
    pub pause: Option<Dur>,
    /// Rounds on the clock instead: round k goes at the phase's start + (k − 1) × every. A run
    /// split into shards needs it (default 1s there) so that every shard fires a round together.
    #[serde(default)]
    pub every: Option<Dur>,
    /// How the round's requests are made to arrive together: `release` (default over HTTP/1.1),
    /// `last-byte` (HTTP/1.1), `single-packet` (HTTP/2, its default).
    #[serde(default)]
    pub sync: Option<SyncMode>,
}

fn ten() -> u32 {
    10
}

fn one() -> u32 {
    1
}

/// Resolves a `burst` phase: its numbers held to their bounds, its durations scaled.
pub(super) fn resolve(b: &BurstFile, scope: &PhaseScope<'_>) -> Result<PhaseKind, ConfigError> {
    if b.size == 0 || b.size > bounds::WORKERS {
        return Err(invalid(
            scope.origin,
            scope.at("burst.size"),
            format!("{}; give 1 to {}", b.size, bounds::WORKERS),
        ));
    }
    if b.rounds == 0 || b.rounds > bounds::ROUNDS {
        return Err(invalid(
            scope.origin,
            scope.at("burst.rounds"),
            format!("{}; give 1 to {}", b.rounds, bounds::ROUNDS),
        ));
    }
    let requests = u64::from(b.size) * u64::from(b.rounds);
    if requests > bounds::OPERATIONS {
        return Err(invalid(
            scope.origin,
            scope.at("burst.rounds"),
            format!(
                "{} rounds of {} make {requests} requests in one phase; at most {}",
                b.rounds,
                b.size,
                bounds::OPERATIONS
            ),
        ));
    }
    let sync = match (b.sync, scope.http2) {
            (None, false) => SyncMode::Release,
            (None, true) => SyncMode::SinglePacket,
            (Some(SyncMode::SinglePacket), false) => {
                return Err(invalid(
                    scope.origin,
                    scope.at("burst.sync"),
                    "single-packet needs HTTP/2 (`http: { version: 2 }` or --http2); over HTTP/1.1 use last-byte",
                ))
            }
            (Some(SyncMode::LastByte), true) => {
                return Err(invalid(
                    scope.origin,
                    scope.at("burst.sync"),
                    "last-byte is for HTTP/1.1; over HTTP/2 use single-packet",
                ))
            }
            (Some(s), _) => s,
        };
    if b.pause.is_some() && b.every.is_some() {
        return Err(invalid(
            scope.origin,
            scope.at("burst.every"),
            "give `pause` (after each round) or `every` (rounds on the clock), not both",
        ));
    }
    let every = match b
        .every
        .map(|d| scope.pause(d.0, scope.at("burst.every")))
        .transpose()?
    {
        Some(e) if e.is_zero() => {
            return Err(invalid(
                scope.origin,
                scope.at("burst.every"),
                "0; give at least 1ms",
            ))
        }
        Some(e) => Some(e),
        // Shards fire each round together only on the clock.
        None if scope.shard.is_split() && b.pause.is_none() => {
            Some(scope.scale(Duration::from_secs(1)))
        }
        None => None,
    };
    if scope.shard.is_split() && every.is_none() {
        return Err(invalid(
            scope.origin,
            scope.at("burst.pause"),
            "a burst split into shards runs its rounds on the clock: replace `pause` with `every`",
        ));
    }
    Ok(PhaseKind::Burst {
        size: b.size,
        rounds: b.rounds,
        pause: scope.pause(
            b.pause.map_or(Duration::ZERO, |d| d.0),
            scope.at("burst.pause"),
        )?,
        every,
        sync,
    })
}
