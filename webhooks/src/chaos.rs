//! Chaos on purpose: which events are delivered twice, which subjects arrive reversed, which
//! deliveries are forged, which acknowledgements are lost.
//!
//! Every choice is a draw from the seed and the id of what it is about ([`crate::draw`]): the
//! same seed picks the same events whatever order, concurrency or shard they are delivered in,
//! and a test can ask about one event without replaying the run. Each kind of chaos has its own
//! draw, so a share of duplicates and a share of forgeries are independent of each other.
//!
//! What each means for the sender:
//! - `duplicates`: the event is delivered `copies` times, each copy a delivery of its own with its
//!   own redeliveries. The copies that go *together* leave in one burst (the sender's sync mode
//!   aligns them): a race, which only a consumer that deduplicates atomically survives. The copies
//!   that go *after the acknowledgement* leave one after another, each once the previous one was
//!   answered: what a provider's redelivery after a lost or late acknowledgement is, and the only
//!   duplicate whose answer tells whether the consumer acknowledges an event it already processed
//!   (a copy sent together with the first cannot: neither had been processed when the other
//!   left). [`Spacing`] says which copies go which way: by default ([`Spacing::Mixed`]) each copy
//!   after the first goes together with it or after it, half each, so that one run has both;
//! - `reorder`: the subject's events are delivered last first;
//! - `forged`: before the event's genuine delivery, one forged delivery of it (a variant drawn
//!   among the style's [`Forgery`]s) carrying an id of its own ([`crate::Plan::forgery_of`]),
//!   never redelivered;
//! - `lost_ack`: the first attempt of that copy has its answer dropped by the sender, who then
//!   redelivers as after a timeout.

use std::time::Duration;

use crate::draw;
use crate::sign::Forgery;
use crate::Style;

/// The most copies of one event.
pub const MAX_COPIES: u32 = 32;

/// The share of copies after the first that go together with it under [`Spacing::Mixed`]; the
/// others go after it was answered. Half each: with `k` duplicated events of two copies, every
/// copy goes the same way with a chance of 2^(1−k) (about 3 % for 6 events, 0.2 % for 10).
pub const TOGETHER_SHARE: f64 = 0.5;

/// How the copies of a duplicated event are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spacing {
    /// Each copy after the first goes together with it or after it was answered, half each
    /// ([`TOGETHER_SHARE`]), drawn per copy from the seed and the event's id: both kinds of
    /// duplicate in one run. The default.
    Mixed,
    /// All copies together, released at once.
    Burst,
    /// Each copy this long after the previous one's delivery ended.
    Spaced(Duration),
}

/// The shares of chaos, as a scenario or the command line says them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChaosSpec {
    /// The share of events delivered more than once.
    pub duplicates: f64,
    /// How many times a duplicated event is delivered (2 or more).
    pub copies: u32,
    /// How the copies go.
    pub spacing: Spacing,
    /// The share of subjects whose events go in reverse order.
    pub reorder: f64,
    /// The share of events that also get a forged delivery.
    pub forged: f64,
    /// The share of deliveries whose first answer the sender drops.
    pub lost_ack: f64,
}

impl Default for ChaosSpec {
    /// No chaos; a duplicate, when asked for, is two copies, together or one after the other's
    /// answer ([`Spacing::Mixed`]).
    fn default() -> ChaosSpec {
        ChaosSpec {
            duplicates: 0.0,
            copies: 2,
            spacing: Spacing::Mixed,
            reorder: 0.0,
            forged: 0.0,
            lost_ack: 0.0,
        }
    }
}

/// A chaos value out of its bounds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChaosError {
    /// A share that is not a number in 0..1.
    #[error("{name} must be a fraction in 0..1, got {value}")]
    Fraction {
        /// The share's name (`duplicates`, `reorder`, `forged`, `lost_ack`).
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// A copy count below 2 or above [`MAX_COPIES`].
    #[error("duplicate copies must be in 2..={max}, got {0}", max = MAX_COPIES)]
    Copies(u32),
}

/// The chaos of one run: shares checked, draws seeded.
#[derive(Debug, Clone)]
pub struct Chaos {
    spec: ChaosSpec,
    style: Style,
    seed: u64,
}

/// What chaos befalls one event.
///
/// Its copies are numbered from 0 in the order they go: copies `0..together` first, together
/// (one burst when there are two or more), then copies `together..copies` one after another,
/// each `gap` after the previous one was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventChaos {
    /// How many genuine copies are delivered (1 when not duplicated).
    pub copies: u32,
    /// How many of them go first, together: from 1 (the first alone) to `copies`.
    pub together: u32,
    /// The wait before each later copy, counted from the end of the previous one's delivery.
    pub gap: Duration,
    /// The forged delivery sent before the genuine ones, if any.
    pub forged: Option<Forgery>,
    lost: u64,
}

impl EventChaos {
    /// Whether the event is delivered more than once on purpose.
    pub fn duplicated(&self) -> bool {
        self.copies > 1
    }

    /// How many copies go after the first was answered: `copies − together`.
    pub fn after_ack(&self) -> u32 {
        self.copies - self.together
    }

    /// Whether the sender drops the answer to the first attempt of copy `copy` (from 0).
    pub fn loses_ack(&self, copy: u32) -> bool {
        copy < 64 && self.lost & (1 << copy) != 0
    }
}

impl Chaos {
    /// Checks `spec`; draws for `style`'s forgeries from `seed`.
    pub fn new(spec: ChaosSpec, style: Style, seed: u64) -> Result<Chaos, ChaosError> {
        for (name, value) in [
            ("duplicates", spec.duplicates),
            ("reorder", spec.reorder),
            ("forged", spec.forged),
            ("lost_ack", spec.lost_ack),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ChaosError::Fraction { name, value });
            }
        }
        if !(2..=MAX_COPIES).contains(&spec.copies) {
            return Err(ChaosError::Copies(spec.copies));
        }
        Ok(Chaos { spec, style, seed })
    }

    /// The shares.
    pub fn spec(&self) -> &ChaosSpec {
        &self.spec
    }

    /// What befalls the event with id `event_id`.
    pub fn for_event(&self, event_id: &str) -> EventChaos {
        let s = &self.spec;
        let copies = if self.hit("duplicates", event_id, 0, s.duplicates) {
            s.copies
        } else {
            1
        };
        let forged = self.hit("forged", event_id, 0, s.forged).then(|| {
            let variants = self.style.forgeries();
            let u = draw::uniform(self.seed, "forgery", event_id, 0);
            variants[((u * variants.len() as f64) as usize).min(variants.len() - 1)]
        });
        let mut lost = 0u64;
        for copy in 0..copies {
            if self.hit("lost_ack", event_id, u64::from(copy), s.lost_ack) {
                lost |= 1 << copy;
            }
        }
        let (together, gap) = match s.spacing {
            Spacing::Burst => (copies, Duration::ZERO),
            Spacing::Spaced(gap) => (1, gap),
            Spacing::Mixed => (
                1 + (1..copies)
                    .filter(|&k| self.hit("together", event_id, u64::from(k), TOGETHER_SHARE))
                    .count() as u32,
                Duration::ZERO,
            ),
        };
        EventChaos {
            copies,
            together,
            gap,
            forged,
            lost,
        }
    }

    /// Whether subject `subject`'s events are delivered in reverse order.
    pub fn reversed(&self, subject: &str) -> bool {
        self.hit("reorder", subject, 0, self.spec.reorder)
    }

    fn hit(&self, what: &str, whose: &str, salt: u64, share: f64) -> bool {
        share > 0.0 && draw::uniform(self.seed, what, whose, salt) < share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chaos(spec: ChaosSpec) -> Chaos {
        Chaos::new(spec, Style::Stripe, 11).unwrap()
    }

    fn ids(n: u64) -> Vec<String> {
        (0..n).map(|i| Style::Stripe.event_id(11, i)).collect()
    }

    #[test]
    fn no_chaos_by_default() {
        let c = chaos(ChaosSpec::default());
        for id in ids(1000) {
            let e = c.for_event(&id);
            assert_eq!((e.copies, e.forged, e.loses_ack(0)), (1, None, false));
            assert!(!e.duplicated());
            assert!(!c.reversed(&id));
        }
    }

    #[test]
    fn everything_at_a_share_of_one() {
        let c = chaos(ChaosSpec {
            duplicates: 1.0,
            copies: 3,
            reorder: 1.0,
            forged: 1.0,
            lost_ack: 1.0,
            spacing: Spacing::Spaced(Duration::from_millis(5)),
        });
        for id in ids(100) {
            let e = c.for_event(&id);
            assert_eq!(e.copies, 3);
            assert_eq!((e.together, e.after_ack()), (1, 2));
            assert_eq!(e.gap, Duration::from_millis(5));
            assert!(e.forged.is_some());
            assert!((0..3).all(|k| e.loses_ack(k)));
            assert!(!e.loses_ack(3), "no fourth copy");
            assert!(c.reversed(&id));
        }
    }

    #[test]
    fn shares_are_honoured_and_independent() {
        let c = chaos(ChaosSpec {
            duplicates: 0.3,
            forged: 0.2,
            lost_ack: 0.1,
            reorder: 0.5,
            ..ChaosSpec::default()
        });
        let all = ids(20_000);
        let n = all.len() as f64;
        let drawn: Vec<EventChaos> = all.iter().map(|id| c.for_event(id)).collect();
        let share =
            |f: &dyn Fn(&EventChaos) -> bool| drawn.iter().filter(|e| f(e)).count() as f64 / n;
        assert!((share(&|e| e.duplicated()) - 0.3).abs() < 0.02);
        assert!((share(&|e| e.forged.is_some()) - 0.2).abs() < 0.02);
        assert!((share(&|e| e.loses_ack(0)) - 0.1).abs() < 0.02);
        // Independent draws: about 0.3 × 0.2 of the events are both duplicated and forged.
        assert!((share(&|e| e.duplicated() && e.forged.is_some()) - 0.06).abs() < 0.01);
        let reversed = (0..10_000)
            .filter(|i| c.reversed(&format!("in_{i}")))
            .count();
        assert!((reversed as f64 / 10_000.0 - 0.5).abs() < 0.03);
    }

    #[test]
    fn every_forgery_of_the_style_is_drawn() {
        for style in Style::ALL {
            let c = Chaos::new(
                ChaosSpec {
                    forged: 1.0,
                    ..ChaosSpec::default()
                },
                style,
                3,
            )
            .unwrap();
            let mut seen: Vec<Forgery> = (0..2000)
                .filter_map(|n| c.for_event(&style.event_id(3, n)).forged)
                .collect();
            seen.sort_by_key(|f| f.name());
            seen.dedup();
            let mut want = style.forgeries().to_vec();
            want.sort_by_key(|f| f.name());
            assert_eq!(seen, want, "{style}");
        }
    }

    #[test]
    fn the_draw_does_not_depend_on_the_order_of_asking() {
        let c = chaos(ChaosSpec {
            duplicates: 0.5,
            forged: 0.5,
            lost_ack: 0.5,
            ..ChaosSpec::default()
        });
        let all = ids(500);
        let forward: Vec<EventChaos> = all.iter().map(|id| c.for_event(id)).collect();
        let mut backward: Vec<EventChaos> = all.iter().rev().map(|id| c.for_event(id)).collect();
        backward.reverse();
        assert_eq!(forward, backward);
        // A new Chaos with the same seed (another process, another shard) agrees.
        let again = chaos(*c.spec());
        assert!(all
            .iter()
            .zip(&forward)
            .all(|(id, e)| again.for_event(id) == *e));
        // Another seed does not.
        let other = Chaos::new(*c.spec(), Style::Stripe, 12).unwrap();
        assert!(all
            .iter()
            .zip(&forward)
            .any(|(id, e)| other.for_event(id) != *e));
    }

    #[test]
    fn mixed_copies_go_together_and_after_the_ack_within_bounds() {
        let all = ids(20_000);
        for copies in [2, 3, 5, MAX_COPIES] {
            let c = chaos(ChaosSpec {
                duplicates: 1.0,
                copies,
                ..ChaosSpec::default()
            });
            let (mut together, mut after) = (0u64, 0u64);
            let (mut all_together, mut all_after) = (false, false);
            for id in &all {
                let e = c.for_event(id);
                assert_eq!(e.copies, copies);
                assert!((1..=copies).contains(&e.together), "{e:?}");
                assert_eq!(e.together + e.after_ack(), copies, "{e:?}");
                assert_eq!(e.gap, Duration::ZERO);
                together += u64::from(e.together - 1);
                after += u64::from(e.after_ack());
                all_together |= e.after_ack() == 0;
                all_after |= e.together == 1;
            }
            // Every copy after the first is a draw of its own, half each way.
            let share = together as f64 / (together + after) as f64;
            assert!((share - TOGETHER_SHARE).abs() < 0.02, "{copies}: {share}");
            if copies <= 5 {
                assert!(all_together && all_after, "{copies}: both extremes occur");
            }
        }
        // An event that is not duplicated goes once, alone.
        let c = chaos(ChaosSpec {
            duplicates: 0.3,
            ..ChaosSpec::default()
        });
        for id in ids(1000) {
            let e = c.for_event(&id);
            if !e.duplicated() {
                assert_eq!((e.together, e.after_ack()), (1, 0), "{e:?}");
            }
        }
    }

    #[test]
    fn the_spacing_decides_the_split_and_nothing_else() {
        let spec = ChaosSpec {
            duplicates: 0.4,
            copies: 3,
            forged: 0.3,
            lost_ack: 0.3,
            ..ChaosSpec::default()
        };
        let mixed = chaos(spec);
        let burst = chaos(ChaosSpec {
            spacing: Spacing::Burst,
            ..spec
        });
        let spaced = chaos(ChaosSpec {
            spacing: Spacing::Spaced(Duration::from_millis(100)),
            ..spec
        });
        let (mut together, mut after) = (0, 0);
        for id in ids(2000) {
            let (m, b, s) = (
                mixed.for_event(&id),
                burst.for_event(&id),
                spaced.for_event(&id),
            );
            // The same events duplicated, forged and losing the same answers whatever the split.
            for other in [b, s] {
                assert_eq!(
                    (other.copies, other.forged, other.lost),
                    (m.copies, m.forged, m.lost)
                );
            }
            assert_eq!((b.together, b.gap), (b.copies, Duration::ZERO));
            assert_eq!((s.together, s.gap), (1, Duration::from_millis(100)));
            if m.duplicated() {
                together += usize::from(m.together > 1);
                after += usize::from(m.after_ack() > 0);
            }
        }
        assert!(together > 0 && after > 0, "{together} {after}");
    }

    #[test]
    fn the_split_is_a_function_of_the_seed_and_the_event() {
        let spec = ChaosSpec {
            duplicates: 1.0,
            copies: 4,
            ..ChaosSpec::default()
        };
        let c = chaos(spec);
        let all = ids(500);
        let split = |c: &Chaos, id: &String| c.for_event(id).together;
        let forward: Vec<u32> = all.iter().map(|id| split(&c, id)).collect();
        let mut backward: Vec<u32> = all.iter().rev().map(|id| split(&c, id)).collect();
        backward.reverse();
        assert_eq!(forward, backward, "the order of asking does not matter");
        let again = chaos(spec);
        assert!(all
            .iter()
            .zip(&forward)
            .all(|(id, t)| split(&again, id) == *t));
        let other = Chaos::new(spec, Style::Stripe, 12).unwrap();
        assert!(all
            .iter()
            .zip(&forward)
            .any(|(id, t)| split(&other, id) != *t));
        // The split draws apart from `lost_ack`: the same copies lose their answers.
        let lossy = chaos(ChaosSpec {
            lost_ack: 0.5,
            ..spec
        });
        let bits = |c: &Chaos, id: &String| {
            let e = c.for_event(id);
            (0..4).map(|k| e.loses_ack(k)).collect::<Vec<_>>()
        };
        let both = chaos(ChaosSpec {
            lost_ack: 0.5,
            spacing: Spacing::Burst,
            ..spec
        });
        assert!(all.iter().all(|id| bits(&lossy, id) == bits(&both, id)));
    }

    #[test]
    fn out_of_bounds_values_are_refused() {
        let bad = [
            (
                ChaosSpec {
                    duplicates: 1.5,
                    ..ChaosSpec::default()
                },
                "duplicates must be a fraction in 0..1, got 1.5",
            ),
            (
                ChaosSpec {
                    reorder: -0.1,
                    ..ChaosSpec::default()
                },
                "reorder must be a fraction in 0..1, got -0.1",
            ),
            (
                ChaosSpec {
                    forged: f64::NAN,
                    ..ChaosSpec::default()
                },
                "forged must be a fraction in 0..1, got NaN",
            ),
            (
                ChaosSpec {
                    lost_ack: f64::INFINITY,
                    ..ChaosSpec::default()
                },
                "lost_ack must be a fraction in 0..1, got inf",
            ),
            (
                ChaosSpec {
                    copies: 1,
                    ..ChaosSpec::default()
                },
                "duplicate copies must be in 2..=32, got 1",
            ),
            (
                ChaosSpec {
                    copies: 33,
                    ..ChaosSpec::default()
                },
                "duplicate copies must be in 2..=32, got 33",
            ),
        ];
        for (spec, message) in bad {
            assert_eq!(
                Chaos::new(spec, Style::Github, 0).unwrap_err().to_string(),
                message
            );
        }
    }
}
