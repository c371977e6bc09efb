//! Webhook provider behaviour, as pure functions: how Standard Webhooks, Stripe and GitHub sign a
//! delivery, the forged deliveries a consumer must refuse, the events of a run, the chaos drawn
//! over them, and when a provider redelivers.
//!
//! Every provider delivers *at least once*: it redelivers on a timeout or a non-2xx, sometimes
//! sends one event twice at once, and sends related events out of order. Playing such a provider
//! against a consumer takes two halves: what to send (this crate) and the sending (the harness's
//! `deliver` executor, which owns the sockets, the clock and the journal). This crate knows no
//! scenario, check or server, reads no clock and opens no socket: a delivery is a function of its
//! event, its secret and the time it is given, a chaos choice a function of the seed and an id,
//! a redelivery decision a function of the outcome and `now`. So each is tested on its own, in
//! virtual time, and the same seed gives the same run however the sender schedules it.
//!
//! The pieces, in the order a sender uses them:
//! - [`Plan`] (from a [`PlanSpec`]): the checked style, secret, [`Events`], [`Chaos`] and
//!   [`Redelivery`] of a run, with each subject's delivery order ([`SubjectPlan::order`]);
//! - [`Event`]: one event's id (in the style's form), subject, type, place in its subject's
//!   sequence and payload (a [`Payload`] template rendered);
//! - [`EventChaos`]: how many copies of the event go, how many of them together and how many
//!   after the first was answered, whether a forged delivery precedes them, which copies lose
//!   their first acknowledgement;
//! - [`Signer`]: the headers and body of one genuine ([`Signer::sign`]) or forged
//!   ([`Signer::forge`], see [`sign`] for the forgeries of each style) [`Delivery`] at a given
//!   time;
//! - [`Delivering`]: one delivery's attempts as a state machine ([`Redelivery::start`], then
//!   [`Delivering::on_outcome`] after each attempt: acknowledged, redeliver at, or give up).
//!
//! [`Verifier`] checks deliveries as the providers' libraries do, for consumers written in Rust
//! (the example consumer uses it).
//!
//! ```
//! use webhooks::{Decision, Outcome, Plan, PlanSpec, Style};
//!
//! let plan = Plan::new(&PlanSpec::new(Style::Stripe, "whsec_example")).unwrap();
//! let subject = plan.subject(0).unwrap();
//! for n in subject.order() {
//!     let event = plan.events().get(n).unwrap();
//!     let delivery = plan.signer().sign(&event.message(), 1_700_000_000).unwrap();
//!     assert!(delivery.header("stripe-signature").unwrap().starts_with("t=1700000000,v1="));
//!     let start = std::time::Instant::now();
//!     let mut attempts = plan.redelivery().start(start);
//!     // The consumer answered 500: Stripe tries again a minute later.
//!     let next = attempts.on_outcome(Outcome::Status(500), start);
//!     assert!(matches!(next, Decision::Redeliver { attempt: 2, .. }));
//! }
//! ```

#![warn(missing_docs)]

pub mod chaos;
mod draw;
pub mod events;
pub mod plan;
pub mod redeliver;
pub mod secret;
pub mod sign;
pub mod style;
pub mod template;
pub mod verify;

pub use chaos::{Chaos, ChaosError, ChaosSpec, EventChaos, Spacing, MAX_COPIES, TOGETHER_SHARE};
pub use events::{Event, EventError, EventSpec, Events, MAX_EVENTS};
pub use plan::{Plan, PlanError, PlanSpec, SubjectPlan};
pub use redeliver::{Decision, Delivering, GiveUp, Outcome, Redelivery, RedeliveryError, Schedule};
pub use secret::{Secret, SecretError};
pub use sign::{Delivery, Forgery, Message, SignError, Signer};
pub use style::{Style, UnknownStyle};
pub use template::{Payload, TemplateError, DEFAULT_PAYLOAD};
pub use verify::{Verifier, VerifyError};
