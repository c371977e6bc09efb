//! `rate`: the open model, constant or in stages — the YAML and its resolver.

use serde::Deserialize;
use yaml_config::{ConfigError, Dur};

use super::{bounds, invalid, PhaseScope};
use crate::plan::PhaseKind;

/// `rate`: open model, constant or in stages (linear ramps between stage targets).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateFile {
    #[serde(default)]
    /// Requests per second, constant.
    pub rps: Option<f64>,
    #[serde(default)]
    /// How long.
    pub duration: Option<Dur>,
    #[serde(default)]
    /// Or stages, each a linear ramp.
    pub stages: Option<Vec<StageFile>>,
    /// Connections (workers) available; a request that finds none free starts late.
    #[serde(default)]
    pub connections: Option<u32>,
}

/// One stage of a ramp: reach `rps` by the end of `duration`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageFile {
    /// The rate reached at the stage's end.
    pub rps: f64,
    /// How long the ramp takes.
    pub duration: Dur,
}

/// Resolves a `rate` phase: its numbers held to their bounds, its durations scaled.
pub(super) fn resolve(r: &RateFile, scope: &PhaseScope<'_>) -> Result<PhaseKind, ConfigError> {
    let stages = match (&r.stages, r.rps, r.duration) {
        (Some(st), None, None) if !st.is_empty() => {
            let mut prev = 0.0;
            st.iter()
                .map(|s| {
                    let x = (prev, s.rps, scope.scale(s.duration.0));
                    prev = s.rps;
                    x
                })
                .collect::<Vec<_>>()
        }
        (None, Some(rps), Some(d)) => vec![(rps, rps, scope.scale(d.0))],
        (None, Some(_), None) => {
            return Err(invalid(
                scope.origin,
                scope.at("rate.duration"),
                "this phase never ends: give `duration`",
            ))
        }
        _ => {
            return Err(invalid(
                scope.origin,
                scope.at("rate"),
                "give `rps` and `duration`, or a non-empty list of `stages`",
            ))
        }
    };
    let in_bounds = |x: f64| x.is_finite() && (0.0..=bounds::RPS).contains(&x);
    let single = r.stages.is_none();
    for (i, (_, rps, d)) in stages.iter().enumerate() {
        let field = if single {
            String::from("rate.")
        } else {
            format!("rate.stages[{i}].")
        };
        if !in_bounds(*rps) || (single && *rps <= 0.0) {
            return Err(invalid(
                scope.origin,
                scope.at(&format!("{field}rps")),
                format!(
                    "{rps}; give {} to {} requests per second",
                    if single { "more than 0" } else { "0" },
                    bounds::RPS
                ),
            ));
        }
        if d.is_zero() || *d > bounds::PHASE {
            return Err(invalid(
                scope.origin,
                scope.at(&format!("{field}duration")),
                format!(
                    "{}; give more than 0, at most {}",
                    scope.scaling.describe(d.div_f64(scope.scaling.factor)),
                    bounds::PHASE_NAME
                ),
            ));
        }
    }
    let total: f64 = stages
        .iter()
        .map(|(a, b, d)| (a + b) / 2.0 * d.as_secs_f64())
        .sum();
    if total < 1.0 {
        return Err(invalid(
            scope.origin,
            scope.at("rate"),
            "this phase would send no request: give a rate above 0",
        ));
    }
    if total > bounds::OPERATIONS as f64 {
        return Err(invalid(
            scope.origin,
            scope.at("rate"),
            format!(
                "{total:.0} requests in one phase; at most {}",
                bounds::OPERATIONS
            ),
        ));
    }
    let connections = r.connections.unwrap_or(64);
    if connections == 0 || connections > bounds::WORKERS {
        return Err(invalid(
            scope.origin,
            scope.at("rate.connections"),
            format!("{connections}; give 1 to {}", bounds::WORKERS),
        ));
    }
    Ok(PhaseKind::Rate {
        stages,
        connections,
    })
}
