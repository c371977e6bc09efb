//! A delivery plan: the style, secret, events, chaos and redelivery of one run, checked once.
//!
//! The plan is what the sender trusts: every value was checked when it was made, so nothing
//! downstream re-parses or re-checks. It stores no per-event state — each subject's order, each
//! event and its chaos are computed when asked for — so its size does not grow with the run.

use std::ops::Range;

use crate::chaos::{Chaos, ChaosError, ChaosSpec, EventChaos};
use crate::events::{Event, EventError, EventSpec, Events};
use crate::redeliver::{Redelivery, RedeliveryError};
use crate::secret::{Secret, SecretError};
use crate::sign::Signer;
use crate::Style;

/// What a run of deliveries is made of, as a scenario or the command line gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSpec {
    /// The provider's style.
    pub style: Style,
    /// The signing secret's text, as the provider shows it.
    pub secret: String,
    /// The seed of event ids and chaos.
    pub seed: u64,
    /// The events.
    pub events: EventSpec,
    /// The chaos.
    pub chaos: ChaosSpec,
    /// How deliveries are redelivered; `None` for the style's own ([`Style::redelivery`]).
    pub redelivery: Option<Redelivery>,
    /// The timestamp tolerance the consumer is expected to enforce, in seconds; `None` for the
    /// style's. `stale` forgeries are older than it.
    pub tolerance: Option<u64>,
}

impl PlanSpec {
    /// A plan of `style` with `secret`, default events and no chaos.
    pub fn new(style: Style, secret: impl Into<String>) -> PlanSpec {
        PlanSpec {
            style,
            secret: secret.into(),
            seed: 0,
            events: EventSpec::default(),
            chaos: ChaosSpec::default(),
            redelivery: None,
            tolerance: None,
        }
    }
}

/// Why a plan could not be made: the first value found out of bounds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// The secret.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The events.
    #[error(transparent)]
    Events(#[from] EventError),
    /// The chaos.
    #[error(transparent)]
    Chaos(#[from] ChaosError),
    /// The redelivery.
    #[error(transparent)]
    Redelivery(#[from] RedeliveryError),
}

/// A checked delivery plan.
#[derive(Debug, Clone)]
pub struct Plan {
    signer: Signer,
    events: Events,
    chaos: Chaos,
    redelivery: Redelivery,
}

/// One subject's part of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectPlan {
    /// The subject's number, from 0.
    pub index: u64,
    /// Its name.
    pub name: String,
    /// Whether its events go last first.
    pub reversed: bool,
    /// Its events' numbers, in logical order.
    pub events: Range<u64>,
}

impl SubjectPlan {
    /// Its events' numbers in the order they are delivered.
    pub fn order(&self) -> impl Iterator<Item = u64> + use<> {
        let Range { start, end } = self.events;
        let reversed = self.reversed;
        (0..end - start).map(move |i| if reversed { end - 1 - i } else { start + i })
    }
}

impl Plan {
    /// Checks `spec` and resolves it.
    pub fn new(spec: &PlanSpec) -> Result<Plan, PlanError> {
        let secret = Secret::parse(spec.style, &spec.secret)?;
        let mut signer = Signer::new(spec.style, secret);
        if let Some(t) = spec.tolerance {
            signer = signer.with_tolerance(t);
        }
        let events = Events::new(&spec.events, spec.style, spec.seed)?;
        let chaos = Chaos::new(spec.chaos, spec.style, spec.seed)?;
        let redelivery = spec
            .redelivery
            .clone()
            .unwrap_or_else(|| spec.style.redelivery());
        redelivery.validate()?;
        Ok(Plan {
            signer,
            events,
            chaos,
            redelivery,
        })
    }

    /// The style.
    pub fn style(&self) -> Style {
        self.signer.style()
    }

    /// The signer.
    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    /// The events.
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// The chaos.
    pub fn chaos(&self) -> &Chaos {
        &self.chaos
    }

    /// The redelivery.
    pub fn redelivery(&self) -> &Redelivery {
        &self.redelivery
    }

    /// Subject `index`'s part, if there is such a subject.
    pub fn subject(&self, index: u64) -> Option<SubjectPlan> {
        let events = self.events.subject_events(index);
        if events.is_empty() {
            return None;
        }
        let name = self.events.subject_name(index);
        Some(SubjectPlan {
            index,
            reversed: self.chaos.reversed(&name),
            name,
            events,
        })
    }

    /// Every subject's part, in order.
    pub fn subjects(&self) -> impl Iterator<Item = SubjectPlan> + '_ {
        (0..self.events.subjects()).filter_map(|i| self.subject(i))
    }

    /// What chaos befalls `event`.
    pub fn event_chaos(&self, event: &Event) -> EventChaos {
        self.chaos.for_event(&event.id)
    }

    /// The state subject `index` should end in: its logically last event's type.
    pub fn expected_state(&self, index: u64) -> Option<&str> {
        self.events.final_type(index)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::redeliver::Schedule;
    use crate::sign::Forgery;
    use crate::Verifier;

    fn spec() -> PlanSpec {
        PlanSpec {
            seed: 5,
            events: EventSpec {
                count: 7,
                ..EventSpec::default()
            },
            chaos: ChaosSpec {
                reorder: 0.5,
                forged: 0.5,
                duplicates: 0.5,
                ..ChaosSpec::default()
            },
            ..PlanSpec::new(Style::StandardWebhooks, "whsec_c2VjcmV0IGtleSBieXRlcw==")
        }
    }

    #[test]
    fn every_event_is_planned_once_in_its_subjects_order() {
        let plan = Plan::new(&spec()).unwrap();
        let subjects: Vec<SubjectPlan> = plan.subjects().collect();
        assert_eq!(subjects.len(), 4);
        let mut seen: Vec<u64> = subjects.iter().flat_map(|s| s.order()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..7).collect::<Vec<_>>());
        for s in &subjects {
            let order: Vec<u64> = s.order().collect();
            let mut logical = order.clone();
            logical.sort_unstable();
            if s.reversed {
                logical.reverse();
            }
            assert_eq!(order, logical, "{s:?}");
        }
        // With this seed, some subjects are reversed and some are not: both paths are exercised.
        assert!(subjects.iter().any(|s| s.reversed) && subjects.iter().any(|s| !s.reversed));
        assert_eq!(plan.subject(4), None);
        assert_eq!(plan.expected_state(0), Some("invoice.paid"));
        assert_eq!(plan.expected_state(3), Some("invoice.created"));
    }

    #[test]
    fn a_planned_event_signs_and_verifies() {
        let plan = Plan::new(&spec()).unwrap();
        let verifier = Verifier::new(
            plan.style(),
            Secret::parse(plan.style(), &spec().secret).unwrap(),
        );
        for s in plan.subjects() {
            for n in s.order() {
                let e = plan.events().get(n).unwrap();
                let d = plan.signer().sign(&e.message(), 1_000_000).unwrap();
                assert_eq!(verifier.verify(&d.header_map(), &d.body, 1_000_000), Ok(()));
                if let Some(f) = plan.event_chaos(&e).forged {
                    let d = plan.signer().forge(&e.message(), 1_000_000, f).unwrap();
                    assert!(verifier
                        .verify(&d.header_map(), &d.body, 1_000_000)
                        .is_err());
                }
            }
        }
    }

    #[test]
    fn the_redelivery_and_tolerance_can_be_the_users() {
        let mine = Redelivery {
            timeout: Duration::from_millis(200),
            schedule: Schedule::List(vec![Duration::from_millis(50)]),
            max_attempts: 2,
        };
        let plan = Plan::new(&PlanSpec {
            redelivery: Some(mine.clone()),
            tolerance: Some(60),
            ..spec()
        })
        .unwrap();
        assert_eq!(plan.redelivery(), &mine);
        assert_eq!(plan.signer().stale_age(), 120);
        let e = plan.events().get(0).unwrap();
        let stale = plan
            .signer()
            .forge(&e.message(), 10_000, Forgery::Stale)
            .unwrap();
        assert_eq!(stale.timestamp, Some(10_000 - 120));
        assert_eq!(
            Plan::new(&spec()).unwrap().redelivery(),
            &Style::StandardWebhooks.redelivery()
        );
    }

    #[test]
    fn the_first_bad_value_is_named() {
        let cases = [
            (
                PlanSpec {
                    secret: "whsec_???".into(),
                    ..spec()
                },
                "a standard-webhooks secret is `whsec_` followed by the key in base64",
            ),
            (
                PlanSpec {
                    events: EventSpec {
                        count: 0,
                        ..EventSpec::default()
                    },
                    ..spec()
                },
                "events must be in 1..=10000000, got 0",
            ),
            (
                PlanSpec {
                    chaos: ChaosSpec {
                        lost_ack: 2.0,
                        ..ChaosSpec::default()
                    },
                    ..spec()
                },
                "lost_ack must be a fraction in 0..1, got 2",
            ),
            (
                PlanSpec {
                    redelivery: Some(Redelivery::none(Duration::ZERO)),
                    ..spec()
                },
                "the delivery timeout must be more than zero",
            ),
        ];
        for (s, message) in cases {
            let e = Plan::new(&s).unwrap_err().to_string();
            assert!(e.starts_with(message), "{e}");
        }
    }
}
