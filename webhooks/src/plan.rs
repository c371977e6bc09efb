//! A delivery plan: the style, secret, events, chaos and redelivery of one run, checked once.
//!
//! The plan is what the sender trusts: every value was checked when it was made, so nothing
//! downstream re-parses or re-checks. It stores no per-event state — each subject's order, each
//! event and its chaos are computed when asked for — so its size does not grow with the run.
//!
//! Two seeds, because a run is replayed against consumers that remember: the chaos (which events
//! are duplicated, forged, reordered) is drawn from `seed` and each event's *number*, so the same
//! seed puts the same chaos on the same events in every run; the ids may come from a seed of their
//! own (`ids`), so that a second run against the same consumer's database sends events it has not
//! seen yet instead of replaying the first run's.
//!
//! A forged delivery carries an event of its own ([`Plan::forgery_of`]): the genuine event's
//! subject, type and place, under an id no genuine delivery uses. What a consumer did with the
//! forgery is then counted apart from what it did with the genuine event — a consumer that takes
//! the forgery's effect and later deduplicates the genuine delivery against it shows one effect
//! per id either way, and only an id of its own tells the two apart.

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
    /// The seed of event ids, when it is not `seed` (see the module docs): chaos stays `seed`'s.
    pub ids: Option<u64>,
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
            ids: None,
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
    /// The forgeries' events: the same sequence under ids of their own.
    forgeries: Events,
    chaos: Chaos,
    redelivery: Redelivery,
    /// Chaos is drawn per event from the id the event has under `seed`, when ids have a seed
    /// of their own.
    stable: Option<u64>,
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
        let id_seed = spec.ids.unwrap_or(spec.seed);
        let events = Events::new(&spec.events, spec.style, id_seed)?;
        let forgeries = Events::new(
            &spec.events,
            spec.style,
            crate::draw::word(id_seed, "forgery-ids", "", 0),
        )?;
        let chaos = Chaos::new(spec.chaos, spec.style, spec.seed)?;
        let redelivery = spec
            .redelivery
            .clone()
            .unwrap_or_else(|| spec.style.redelivery());
        redelivery.validate()?;
        Ok(Plan {
            signer,
            events,
            forgeries,
            chaos,
            redelivery,
            stable: spec.ids.filter(|&ids| ids != spec.seed).map(|_| spec.seed),
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

    /// What chaos befalls `event`: drawn from the seed and the event's number, whatever its id
    /// (see the module docs).
    pub fn event_chaos(&self, event: &Event) -> EventChaos {
        match self.stable {
            Some(seed) => self
                .chaos
                .for_event(&self.style().event_id(seed, event.number)),
            None => self.chaos.for_event(&event.id),
        }
    }

    /// The event a forged delivery of `event` carries: its subject, type, place and payload,
    /// under an id of its own that no genuine delivery uses (see the module docs).
    pub fn forgery_of(&self, event: &Event) -> Event {
        self.forgeries
            .get(event.number)
            .unwrap_or_else(|| event.clone())
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
    fn ids_of_their_own_keep_the_chaos_of_the_seed() {
        let stable = Plan::new(&spec()).unwrap();
        let fresh = Plan::new(&PlanSpec {
            ids: Some(99),
            ..spec()
        })
        .unwrap();
        let mut duplicated = 0;
        for n in 0..7 {
            let (a, b) = (
                stable.events().get(n).unwrap(),
                fresh.events().get(n).unwrap(),
            );
            assert_ne!(a.id, b.id, "a run of its own sends ids of its own");
            assert_eq!(
                (&a.subject, &a.event_type, a.seq),
                (&b.subject, &b.event_type, b.seq)
            );
            assert_eq!(stable.event_chaos(&a), fresh.event_chaos(&b));
            duplicated += usize::from(fresh.event_chaos(&b).duplicated());
        }
        assert!(duplicated > 0, "the comparison saw some chaos");
        // `ids` equal to the seed is no seed of its own.
        let same = Plan::new(&PlanSpec {
            ids: Some(5),
            ..spec()
        })
        .unwrap();
        let e = same.events().get(3).unwrap();
        assert_eq!(e, stable.events().get(3).unwrap());
        assert_eq!(same.event_chaos(&e), stable.event_chaos(&e));
    }

    #[test]
    fn a_default_run_sends_duplicates_together_and_after_the_ack() {
        // The command line's defaults: seed 1, 100 events, two copies, ids of the run's own.
        for style in Style::ALL {
            for tenths in 1..=10 {
                let plan = Plan::new(&PlanSpec {
                    seed: 1,
                    ids: Some(77),
                    chaos: ChaosSpec {
                        duplicates: f64::from(tenths) / 10.0,
                        ..ChaosSpec::default()
                    },
                    events: EventSpec::default(),
                    ..PlanSpec::new(style, spec().secret)
                })
                .unwrap();
                let (mut together, mut after) = (0, 0);
                for n in 0..100 {
                    let c = plan.event_chaos(&plan.events().get(n).unwrap());
                    together += c.together - 1;
                    after += c.after_ack();
                }
                assert!(
                    together > 0 && after > 0,
                    "{style} at {tenths}/10: {together} together, {after} after the ack"
                );
            }
        }
    }

    #[test]
    fn a_forgery_carries_an_event_of_its_own() {
        let plan = Plan::new(&spec()).unwrap();
        let ids: Vec<String> = (0..7).map(|n| plan.events().get(n).unwrap().id).collect();
        for n in 0..7 {
            let e = plan.events().get(n).unwrap();
            let f = plan.forgery_of(&e);
            assert!(!ids.contains(&f.id), "{} is a genuine id", f.id);
            assert!(f.id.starts_with("msg_"), "{}", f.id);
            assert_eq!(
                (&f.subject, &f.event_type, f.seq, f.number),
                (&e.subject, &e.event_type, e.seq, e.number)
            );
            let body: serde_json::Value = serde_json::from_slice(&f.body).unwrap();
            assert_eq!(
                body["id"],
                f.id.as_str(),
                "the payload names the forgery's id"
            );
            assert_eq!(plan.forgery_of(&e), f, "computed, the same each time");
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
