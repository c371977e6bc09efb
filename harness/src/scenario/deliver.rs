//! `deliver`: a webhook provider delivering at least once to the consumer at the target — the
//! YAML and its resolver.
//!
//! ```yaml
//! target: http://127.0.0.1:8000
//! phases:
//!   - name: webhooks
//!     deliver:
//!       style: stripe                 # standard-webhooks | stripe | github
//!       secret: whsec_test
//!       events: 40                    # default 100
//!       types: [invoice.created, invoice.paid]
//!       payload: '{"id":"{{event_id}}","type":"{{type}}","data":{"object":{"id":"{{subject}}","seq":{{seq}}}}}'
//!       duplicates: 0.3               # a share of events delivered `copies` times (default 2)
//!       spacing: mixed                # mixed (default): each copy after the first goes with it or
//!                                     # after its answer, half each; together (one burst, as
//!                                     # `sync` says); or a gap after each answer: 200ms
//!       sync: last-byte               # release | last-byte (HTTP/1.1) | single-packet (HTTP/2)
//!       reorder: 0.5                  # a share of subjects delivered last event first
//!       forged: 0.2                   # a share of events preceded by a forged delivery
//!       lost_ack: 0.1                 # a share of copies whose first answer is dropped
//!       timeout: 10s                  # the provider's wait for an answer (default the style's)
//!       redeliver: 1s,2s,4s           # none | provider | WAIT,WAIT,… | exp:FIRST:FACTOR:WITHIN
//!       tolerance: 5m                 # the timestamp tolerance stale forgeries exceed
//!       concurrency: 8                # workers, each delivering one subject at a time
//!     request: { path: /webhook }     # POST by default; headers may be added
//! ```
//!
//! Durations are the scenario's (`timeout`, the redelivery waits, `spacing`): the time scale
//! multiplies them. `tolerance` is the consumer's clock's, and the signatures are made on the
//! wall clock: neither scales.

use std::time::Duration;

use serde::Deserialize;
use webhooks::{
    ChaosError, ChaosSpec, EventError, EventSpec, PlanError, PlanSpec, Redelivery, RedeliveryError,
    Schedule, Spacing, Style,
};
use yaml_config::{ConfigError, Dur};

use super::{bounds, invalid, PhaseScope};
use crate::plan::{DeliverPlan, PhaseKind, SyncMode};

/// The most events one deliver phase may send (each is followed per id by the checks).
pub const MAX_EVENTS: u64 = 1_000_000;

/// The redelivery schedule when none is given: the providers' shape (a few waits, growing), short
/// enough that a run against a consumer that keeps failing still ends.
pub const DEFAULT_REDELIVER: &str = "1s,2s,4s";

/// `deliver`: a webhook provider playing against the consumer at the target.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliverFile {
    /// `standard-webhooks`, `stripe` or `github`.
    pub style: String,
    /// The signing secret, as the provider shows it (`whsec_…`).
    pub secret: String,
    /// How many events (default 100).
    #[serde(default)]
    pub events: Option<u64>,
    /// Each subject's event types, in their logical order (default `invoice.created`,
    /// `invoice.paid`).
    #[serde(default)]
    pub types: Option<Vec<String>>,
    /// What subject names start with (default `in_`).
    #[serde(default)]
    pub subject_prefix: Option<String>,
    /// The JSON payload template (a string, or a mapping written as JSON) with `{{event_id}}`,
    /// `{{subject}}`, `{{type}}`, `{{seq}}`.
    #[serde(default)]
    pub payload: Option<serde_json::Value>,
    /// The share of events delivered more than once.
    #[serde(default)]
    pub duplicates: Option<f64>,
    /// How many copies a duplicated event gets (default 2).
    #[serde(default)]
    pub copies: Option<u32>,
    /// How the copies go: `mixed` (default: each copy after the first goes together with it or
    /// after it was answered, half each, drawn from the seed and the event's id), `together` (one
    /// burst, released as `sync` says), or a duration: each copy that long after the previous one
    /// was answered.
    #[serde(default)]
    pub spacing: Option<String>,
    /// How copies sent together are released: `release` (default over HTTP/1.1), `last-byte`
    /// (HTTP/1.1), `single-packet` (HTTP/2, its default).
    #[serde(default)]
    pub sync: Option<SyncMode>,
    /// The share of subjects whose events go last first.
    #[serde(default)]
    pub reorder: Option<f64>,
    /// The share of events preceded by a forged delivery.
    #[serde(default)]
    pub forged: Option<f64>,
    /// The share of copies whose first answer the sender drops.
    #[serde(default)]
    pub lost_ack: Option<f64>,
    /// How long the provider waits for an answer (default the style's: 15 s Standard Webhooks,
    /// 10 s Stripe and GitHub).
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// When a failed delivery is due again: `none`, `provider` (the style's own schedule),
    /// `WAIT,WAIT,…`, or `exp:FIRST:FACTOR:WITHIN` (default `1s,2s,4s`).
    #[serde(default)]
    pub redeliver: Option<String>,
    /// The timestamp tolerance the consumer enforces (default the style's: 5 minutes).
    #[serde(default)]
    pub tolerance: Option<Dur>,
    /// Workers, each delivering one subject at a time (default 10).
    #[serde(default)]
    pub concurrency: Option<u32>,
}

impl DeliverFile {
    /// A phase of `style` with `secret` and every other value its default.
    pub fn new(style: impl Into<String>, secret: impl Into<String>) -> DeliverFile {
        DeliverFile {
            style: style.into(),
            secret: secret.into(),
            events: None,
            types: None,
            subject_prefix: None,
            payload: None,
            duplicates: None,
            copies: None,
            spacing: None,
            sync: None,
            reorder: None,
            forged: None,
            lost_ack: None,
            timeout: None,
            redeliver: None,
            tolerance: None,
            concurrency: None,
        }
    }
}

/// Parses a redelivery schedule (`none`, `provider`, `1s,5s,30s`, `exp:1s:2:10m`) for `style`,
/// each wait passed through `scale`, attempts timing out after `timeout` (already scaled).
pub fn parse_redeliver(
    text: &str,
    style: Style,
    timeout: Duration,
    scale: &dyn Fn(Duration) -> Duration,
) -> Result<Redelivery, String> {
    let text = text.trim();
    let duration =
        |s: &str| -> Result<Duration, String> { yaml_config::parse_duration(s.trim()).map(scale) };
    let r = match text {
        "none" => Redelivery::none(timeout),
        "provider" => {
            let own = style.redelivery();
            let schedule = match own.schedule {
                Schedule::List(waits) => Schedule::List(waits.into_iter().map(scale).collect()),
                Schedule::Exponential {
                    first,
                    factor,
                    within,
                } => Schedule::Exponential {
                    first: scale(first),
                    factor,
                    within: scale(within),
                },
            };
            Redelivery {
                timeout,
                schedule,
                max_attempts: own.max_attempts,
            }
        }
        t if t.starts_with("exp:") => {
            let parts: Vec<&str> = t["exp:".len()..].split(':').collect();
            let [first, factor, within] = parts[..] else {
                return Err(format!(
                    "{t:?}: an exponential schedule is exp:FIRST:FACTOR:WITHIN, e.g. exp:1s:2:10m"
                ));
            };
            let factor: f64 = factor
                .trim()
                .parse()
                .map_err(|_| format!("{t:?}: the factor {factor:?} is not a number"))?;
            Redelivery {
                timeout,
                schedule: Schedule::Exponential {
                    first: duration(first)?,
                    factor,
                    within: duration(within)?,
                },
                max_attempts: Redelivery::MAX_ATTEMPTS,
            }
        }
        t => {
            let waits = t
                .split(',')
                .map(duration)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    format!(
                        "{e}; a schedule is none, provider, WAIT,WAIT,… or exp:FIRST:FACTOR:WITHIN"
                    )
                })?;
            let max_attempts = u32::try_from(waits.len() + 1).unwrap_or(u32::MAX);
            Redelivery {
                timeout,
                schedule: Schedule::List(waits),
                max_attempts,
            }
        }
    };
    r.validate().map_err(|e| e.to_string())?;
    Ok(r)
}

/// The longest a delivery may keep being redelivered under `r`: its waits, and an attempt's
/// timeout for each attempt.
fn span(r: &Redelivery) -> Duration {
    let waits = match &r.schedule {
        Schedule::List(w) => w.iter().sum(),
        Schedule::Exponential { within, .. } => *within,
    };
    waits.saturating_add(r.timeout.saturating_mul(r.max_attempts))
}

/// Resolves a `deliver` phase: every value checked once (by the `webhooks` crate's plan, its
/// errors placed at their fields), its durations scaled.
pub(super) fn resolve(d: &DeliverFile, scope: &PhaseScope<'_>) -> Result<PhaseKind, ConfigError> {
    let at = |f: &str| scope.at(&format!("deliver.{f}"));
    let bad = |f: &str, m: String| invalid(scope.origin, at(f), m);
    if scope.shard.is_split() {
        return Err(invalid(
            scope.origin,
            scope.at("deliver"),
            "a deliver phase runs in one process: it cannot be split into shards",
        ));
    }
    let style: Style = d.style.parse().map_err(|e| bad("style", format!("{e}")))?;
    let count = d.events.unwrap_or(100);
    if !(1..=MAX_EVENTS).contains(&count) {
        return Err(bad(
            "events",
            format!("{count}; give 1 to {MAX_EVENTS} events"),
        ));
    }
    let concurrency = d.concurrency.unwrap_or(10);
    if concurrency == 0 || concurrency > bounds::WORKERS {
        return Err(bad(
            "concurrency",
            format!("{concurrency}; give 1 to {}", bounds::WORKERS),
        ));
    }
    let sync = match (d.sync, scope.http2) {
        (None, false) => SyncMode::Release,
        (None, true) => SyncMode::SinglePacket,
        (Some(SyncMode::SinglePacket), false) => {
            return Err(bad(
                "sync",
                "single-packet needs HTTP/2 (`http: { version: 2 }` or --http2); over HTTP/1.1 use last-byte".into(),
            ))
        }
        (Some(SyncMode::LastByte), true) => {
            return Err(bad(
                "sync",
                "last-byte is for HTTP/1.1; over HTTP/2 use single-packet".into(),
            ))
        }
        (Some(s), _) => s,
    };
    let spacing = match d.spacing.as_deref().map(str::trim) {
        None | Some("mixed") => Spacing::Mixed,
        Some("together") => Spacing::Burst,
        Some(gap) => {
            let g = yaml_config::parse_duration(gap).map_err(|e| {
                bad(
                    "spacing",
                    format!(
                        "{e}; give `mixed` (together and after the acknowledgement, the \
                         default), `together`, or a duration between copies"
                    ),
                )
            })?;
            Spacing::Spaced(scope.pause(g, at("spacing"))?)
        }
    };
    let timeout = match d.timeout {
        Some(t) => {
            scope
                .scaling
                .within(t.0, at("timeout"), bounds::DURATION, bounds::DURATION_NAME)?
        }
        None => scope.scale(style.ack_timeout()),
    };
    if timeout.is_zero() {
        return Err(bad("timeout", "0; give at least 1ms".into()));
    }
    let schedule = d.redeliver.as_deref().unwrap_or(DEFAULT_REDELIVER);
    let redelivery = parse_redeliver(schedule, style, timeout, &|w| scope.scale(w))
        .map_err(|e| bad("redeliver", e))?;
    if span(&redelivery) > bounds::PHASE {
        return Err(bad(
            "redeliver",
            format!(
                "{schedule:?} keeps a delivery going for {} once scaled; at most {} (a shorter \
                 schedule, or a smaller --time-scale)",
                super::human(span(&redelivery)),
                bounds::PHASE_NAME
            ),
        ));
    }
    let payload = match &d.payload {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    };
    let defaults = EventSpec::default();
    let spec = PlanSpec {
        style,
        secret: d.secret.clone(),
        seed: scope.seed,
        events: EventSpec {
            count,
            types: d.types.clone().unwrap_or(defaults.types),
            subject_prefix: d.subject_prefix.clone().unwrap_or(defaults.subject_prefix),
            payload,
        },
        chaos: ChaosSpec {
            duplicates: d.duplicates.unwrap_or(0.0),
            copies: d.copies.unwrap_or(2),
            spacing,
            reorder: d.reorder.unwrap_or(0.0),
            forged: d.forged.unwrap_or(0.0),
            lost_ack: d.lost_ack.unwrap_or(0.0),
        },
        redelivery: Some(redelivery),
        tolerance: d.tolerance.map(|t| t.0.as_secs()),
        ids: None,
    };
    // The crate checks every value once; its first complaint is placed at its field.
    if let Err(e) = webhooks::Plan::new(&spec) {
        let field = match &e {
            PlanError::Secret(_) => "secret",
            PlanError::Events(EventError::Count(_)) => "events",
            PlanError::Events(EventError::Name { what, .. }) if *what == "subject prefix" => {
                "subject_prefix"
            }
            PlanError::Events(EventError::Payload(_)) => "payload",
            PlanError::Events(_) => "types",
            PlanError::Chaos(ChaosError::Fraction { name, .. }) => name,
            PlanError::Chaos(ChaosError::Copies(_)) => "copies",
            PlanError::Redelivery(RedeliveryError::ZeroTimeout) => "timeout",
            PlanError::Redelivery(_) => "redeliver",
        };
        return Err(bad(field, e.to_string()));
    }
    Ok(PhaseKind::Deliver(Box::new(DeliverPlan {
        spec,
        concurrency,
        sync,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn redelivery_schedules_in_every_form() {
        let same = |d: Duration| d;
        let r = parse_redeliver("1s,5s,30s", Style::Stripe, secs(10), &same).unwrap();
        assert_eq!(r.schedule, Schedule::List(vec![secs(1), secs(5), secs(30)]));
        assert_eq!((r.max_attempts, r.timeout), (4, secs(10)));
        let r = parse_redeliver("none", Style::Stripe, secs(3), &same).unwrap();
        assert_eq!(r, Redelivery::none(secs(3)));
        let r = parse_redeliver("exp:1s:2:10m", Style::Stripe, secs(3), &same).unwrap();
        assert_eq!(
            r.schedule,
            Schedule::Exponential {
                first: secs(1),
                factor: 2.0,
                within: secs(600)
            }
        );
        // The provider's own, scaled: Svix's 5 s first wait at a time scale of 0.1.
        let tenth = |d: Duration| d.mul_f64(0.1);
        let r = parse_redeliver("provider", Style::StandardWebhooks, secs(1), &tenth).unwrap();
        assert_eq!(r.max_attempts, 8);
        assert_eq!(r.wait_before(1), Some(Duration::from_millis(500)));
        assert!(span(&r) > secs(2 * 3600), "Svix's schedule spans a day");
        for (bad, says) in [
            ("1s,,2s", "duration"),
            ("exp:1s:2", "exp:FIRST:FACTOR:WITHIN"),
            ("exp:1s:x:1m", "not a number"),
            ("exp:1s:0.5:1m", "a factor of at least 1"),
            ("soon", "a schedule is none, provider"),
        ] {
            let e = parse_redeliver(bad, Style::Stripe, secs(1), &same).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
