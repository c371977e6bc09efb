//! Redelivery as providers do it, as a decision only.
//!
//! A provider sends, waits up to its timeout for an answer, and counts the delivery acknowledged
//! on a 2xx alone: any other status (a 3xx included), a timeout, a refused or broken connection —
//! and an answer lost on the way back — all mean "try again later", on its schedule, until it runs
//! out of attempts or of time. This module only *decides* that: it reads no clock (it is given
//! `now`), sends nothing and sleeps never, so a schedule of hours is tested in virtual time and the
//! sender that carries the decisions out is the only place that waits.

use std::time::{Duration, Instant};

/// How a provider redelivers one delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Redelivery {
    /// How long an attempt may wait for its answer before it counts as timed out.
    pub timeout: Duration,
    /// When each redelivery is due.
    pub schedule: Schedule,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
}

/// When each redelivery is due, counted from the failure of the attempt before it (as Svix and
/// Stripe count).
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// Exponential backoff: the first redelivery `first` after the failure, each next one
    /// `factor` times the previous wait, none due later than `within` after the first attempt
    /// (Stripe's "for up to three days").
    Exponential {
        /// The wait before the first redelivery.
        first: Duration,
        /// What each wait is multiplied by for the next (at least 1).
        factor: f64,
        /// No redelivery is due later than this after the first attempt started.
        within: Duration,
    },
    /// An explicit list: the wait before redelivery 1, 2, …; the list's end ends the redeliveries.
    List(Vec<Duration>),
}

/// A value of a [`Redelivery`] out of its bounds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RedeliveryError {
    /// The attempt timeout is zero.
    #[error("the delivery timeout must be more than zero")]
    ZeroTimeout,
    /// `max_attempts` is 0 or above [`Redelivery::MAX_ATTEMPTS`].
    #[error("the maximum number of delivery attempts must be in 1..={max}, got {0}", max = Redelivery::MAX_ATTEMPTS)]
    MaxAttempts(u32),
    /// An exponential schedule's first wait or horizon is zero, or its factor is below 1 or not
    /// finite.
    #[error("an exponential redelivery schedule needs a first wait and a horizon above zero and a factor of at least 1, got first {first:?}, factor {factor}, within {within:?}")]
    Exponential {
        /// The first wait.
        first: Duration,
        /// The factor.
        factor: f64,
        /// The horizon.
        within: Duration,
    },
    /// A listed schedule is longer than [`Redelivery::MAX_ATTEMPTS`] allows.
    #[error("a redelivery schedule lists at most {max} waits, got {0}", max = Redelivery::MAX_ATTEMPTS - 1)]
    ListTooLong(usize),
}

impl Redelivery {
    /// The most attempts a delivery may be given: a bound on the work one event can cause.
    pub const MAX_ATTEMPTS: u32 = 100;

    /// No redelivery: one attempt with `timeout`.
    pub fn none(timeout: Duration) -> Redelivery {
        Redelivery {
            timeout,
            schedule: Schedule::List(Vec::new()),
            max_attempts: 1,
        }
    }

    /// Checks every value against its bounds.
    pub fn validate(&self) -> Result<(), RedeliveryError> {
        if self.timeout.is_zero() {
            return Err(RedeliveryError::ZeroTimeout);
        }
        if !(1..=Self::MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(RedeliveryError::MaxAttempts(self.max_attempts));
        }
        match &self.schedule {
            Schedule::Exponential {
                first,
                factor,
                within,
            } => {
                if first.is_zero() || within.is_zero() || !factor.is_finite() || *factor < 1.0 {
                    return Err(RedeliveryError::Exponential {
                        first: *first,
                        factor: *factor,
                        within: *within,
                    });
                }
            }
            Schedule::List(waits) => {
                if waits.len() >= Self::MAX_ATTEMPTS as usize {
                    return Err(RedeliveryError::ListTooLong(waits.len()));
                }
            }
        }
        Ok(())
    }

    /// The wait before redelivery `n` (from 1), if the schedule has one; the attempt limit and
    /// the horizon are applied by [`Delivering::on_outcome`].
    pub fn wait_before(&self, n: u32) -> Option<Duration> {
        if n == 0 {
            return None;
        }
        match &self.schedule {
            Schedule::Exponential {
                first,
                factor,
                within,
            } => {
                let exponent = i32::try_from(n - 1).unwrap_or(i32::MAX);
                let secs = first.as_secs_f64() * factor.powi(exponent);
                // A wait beyond the horizon is never taken; capping it keeps the value finite.
                Some(Duration::try_from_secs_f64(secs).map_or(*within, |d| d.min(*within)))
            }
            Schedule::List(waits) => waits.get(n as usize - 1).copied(),
        }
    }

    /// One delivery's attempts, the first starting at `now`.
    pub fn start(&self, now: Instant) -> Delivering<'_> {
        Delivering {
            policy: self,
            first: now,
            attempts: 1,
            done: None,
        }
    }

    /// A delivery whose first attempt started at `first`, taken up again with attempt `attempt`
    /// in flight: what a sender that keeps pending redeliveries in a queue, rather than a
    /// borrowed [`Delivering`] per delivery, keeps of each (see [`Delivering::first`]).
    pub fn resume(&self, first: Instant, attempt: u32) -> Delivering<'_> {
        Delivering {
            policy: self,
            first,
            attempts: attempt.max(1),
            done: None,
        }
    }
}

/// How one attempt ended, as the sender saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An answer with this status arrived within the timeout.
    Status(u16),
    /// No answer within the timeout.
    TimedOut,
    /// The connection could not be made, or broke before an answer.
    ConnectionFailed,
    /// The sender dropped the answer on purpose (`lost_ack`): to the provider, a timeout.
    AnswerDropped,
}

impl Outcome {
    /// Whether the provider counts this attempt as acknowledged: a 2xx, and nothing else.
    pub fn acknowledged(self) -> bool {
        matches!(self, Outcome::Status(s) if (200..300).contains(&s))
    }
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The consumer acknowledged the delivery: nothing more to send.
    Acknowledged,
    /// Send attempt `attempt` at `at`.
    Redeliver {
        /// The attempt's number, from 2.
        attempt: u32,
        /// When it is due.
        at: Instant,
    },
    /// Stop without an acknowledgement.
    GiveUp(GiveUp),
}

/// Why a provider stopped redelivering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// The attempts allowed were all made.
    MaxAttempts,
    /// The schedule has no further wait (a listed schedule ran out).
    Schedule,
    /// The next redelivery would fall beyond the exponential schedule's horizon.
    Horizon,
}

/// The attempts of one delivery, as a state machine: [`Delivering::on_outcome`] after each.
#[derive(Debug, Clone)]
pub struct Delivering<'a> {
    policy: &'a Redelivery,
    first: Instant,
    attempts: u32,
    done: Option<Decision>,
}

impl Delivering<'_> {
    /// The number of the attempt in flight (or the last one made), from 1.
    pub fn attempt(&self) -> u32 {
        self.attempts
    }

    /// When the delivery's first attempt started.
    pub fn first(&self) -> Instant {
        self.first
    }

    /// When an attempt sent at `sent` times out.
    pub fn deadline(&self, sent: Instant) -> Instant {
        sent + self.policy.timeout
    }

    /// The attempt in flight ended at `now` with `outcome`: what next. Once the delivery is
    /// acknowledged or given up, every later call returns that same decision.
    pub fn on_outcome(&mut self, outcome: Outcome, now: Instant) -> Decision {
        if let Some(d) = self.done {
            return d;
        }
        let decision = if outcome.acknowledged() {
            Decision::Acknowledged
        } else if self.attempts >= self.policy.max_attempts {
            Decision::GiveUp(GiveUp::MaxAttempts)
        } else {
            match self.policy.wait_before(self.attempts) {
                None => Decision::GiveUp(GiveUp::Schedule),
                Some(wait) => {
                    let at = now + wait;
                    let beyond = match self.policy.schedule {
                        Schedule::Exponential { within, .. } => at > self.first + within,
                        Schedule::List(_) => false,
                    };
                    if beyond {
                        Decision::GiveUp(GiveUp::Horizon)
                    } else {
                        self.attempts += 1;
                        Decision::Redeliver {
                            attempt: self.attempts,
                            at,
                        }
                    }
                }
            }
        };
        if !matches!(decision, Decision::Redeliver { .. }) {
            self.done = Some(decision);
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Style;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Runs a delivery whose every attempt ends in `outcome` the moment it is sent, in virtual
    /// time: the offsets from the first attempt at which each attempt was sent, and how it ended.
    fn failing(policy: &Redelivery, outcome: Outcome) -> (Vec<Duration>, Decision) {
        let t0 = Instant::now();
        let mut d = policy.start(t0);
        let mut sent = vec![Duration::ZERO];
        let mut now = t0;
        loop {
            match d.on_outcome(outcome, now) {
                Decision::Redeliver { attempt, at } => {
                    assert_eq!(attempt as usize, sent.len() + 1);
                    now = at;
                    sent.push(at - t0);
                }
                end => return (sent, end),
            }
        }
    }

    #[test]
    fn only_a_2xx_acknowledges() {
        for s in [200, 201, 202, 204, 299] {
            assert!(Outcome::Status(s).acknowledged(), "{s}");
        }
        for s in [100, 199, 301, 304, 400, 409, 429, 500, 503] {
            assert!(!Outcome::Status(s).acknowledged(), "{s}");
        }
        for o in [
            Outcome::TimedOut,
            Outcome::ConnectionFailed,
            Outcome::AnswerDropped,
        ] {
            assert!(!o.acknowledged());
        }
    }

    #[test]
    fn svix_schedule_is_followed_to_its_end() {
        let policy = Style::StandardWebhooks.redelivery();
        let (sent, end) = failing(&policy, Outcome::Status(500));
        let minutes = |m: u64| secs(60 * m);
        assert_eq!(
            sent,
            [
                Duration::ZERO,
                secs(5),
                secs(5) + minutes(5),
                secs(5) + minutes(35),
                secs(5) + minutes(35 + 120),
                secs(5) + minutes(35 + 120 + 300),
                secs(5) + minutes(35 + 120 + 300 + 600),
                secs(5) + minutes(35 + 120 + 300 + 600 + 600),
            ]
        );
        assert_eq!(end, Decision::GiveUp(GiveUp::MaxAttempts));
    }

    #[test]
    fn a_timeout_a_broken_connection_and_a_dropped_answer_are_redelivered() {
        let policy = Redelivery {
            timeout: secs(1),
            schedule: Schedule::List(vec![secs(2), secs(4)]),
            max_attempts: 10,
        };
        for o in [
            Outcome::TimedOut,
            Outcome::ConnectionFailed,
            Outcome::AnswerDropped,
            Outcome::Status(302),
            Outcome::Status(409),
        ] {
            let (sent, end) = failing(&policy, o);
            assert_eq!(sent, [Duration::ZERO, secs(2), secs(6)], "{o:?}");
            // The list ran out before the attempts did.
            assert_eq!(end, Decision::GiveUp(GiveUp::Schedule), "{o:?}");
        }
    }

    #[test]
    fn stripe_like_backoff_doubles_within_three_days() {
        let policy = Style::Stripe.redelivery();
        let (sent, end) = failing(&policy, Outcome::TimedOut);
        let mut expected = vec![Duration::ZERO];
        let mut at = Duration::ZERO;
        let mut wait = secs(60);
        while at + wait <= secs(72 * 3600) {
            at += wait;
            expected.push(at);
            wait *= 2;
        }
        assert_eq!(sent, expected);
        // 12 redeliveries: the 13th wait would end after 60 s × (2^13 − 1) > 72 h.
        assert_eq!(sent.len(), 13, "{sent:?}");
        assert_eq!(end, Decision::GiveUp(GiveUp::Horizon));
    }

    #[test]
    fn the_wait_is_counted_from_the_failure() {
        let policy = Redelivery {
            timeout: secs(10),
            schedule: Schedule::List(vec![secs(5)]),
            max_attempts: 2,
        };
        let t0 = Instant::now();
        let mut d = policy.start(t0);
        assert_eq!(d.deadline(t0), t0 + secs(10));
        // The first attempt timed out 10 s after it was sent: the redelivery is 5 s after that.
        let failed = t0 + secs(10);
        assert_eq!(
            d.on_outcome(Outcome::TimedOut, failed),
            Decision::Redeliver {
                attempt: 2,
                at: failed + secs(5)
            }
        );
        assert_eq!(d.attempt(), 2);
        assert_eq!(
            d.on_outcome(Outcome::Status(204), failed + secs(6)),
            Decision::Acknowledged
        );
        // Settled: a stray later outcome changes nothing.
        assert_eq!(
            d.on_outcome(Outcome::Status(500), failed + secs(7)),
            Decision::Acknowledged
        );
    }

    #[test]
    fn a_resumed_delivery_decides_as_the_one_it_continues() {
        let policy = Redelivery {
            timeout: secs(1),
            schedule: Schedule::Exponential {
                first: secs(2),
                factor: 2.0,
                within: secs(20),
            },
            max_attempts: 10,
        };
        let t0 = Instant::now();
        let mut kept = policy.start(t0);
        let mut now = t0;
        // Each decision made by the delivery kept whole, and by one rebuilt from its first
        // attempt's start and the attempt in flight, as a queue keeps it.
        loop {
            let resumed = policy
                .resume(kept.first(), kept.attempt())
                .on_outcome(Outcome::Status(503), now);
            let decision = kept.on_outcome(Outcome::Status(503), now);
            assert_eq!(resumed, decision);
            match decision {
                Decision::Redeliver { at, .. } => now = at,
                _ => break,
            }
        }
        // 2 s, 4 s, 8 s: the next wait (16 s) would end beyond the 20 s horizon.
        assert_eq!(now - t0, secs(14));
        assert_eq!(kept.attempt(), 4);
        assert_eq!(policy.resume(t0, 0).attempt(), 1);
    }

    #[test]
    fn max_attempts_caps_any_schedule() {
        let policy = Redelivery {
            timeout: secs(1),
            schedule: Schedule::Exponential {
                first: secs(1),
                factor: 1.0,
                within: secs(1_000_000),
            },
            max_attempts: 3,
        };
        let (sent, end) = failing(&policy, Outcome::Status(503));
        assert_eq!(sent, [Duration::ZERO, secs(1), secs(2)]);
        assert_eq!(end, Decision::GiveUp(GiveUp::MaxAttempts));
        let (sent, end) = failing(&Redelivery::none(secs(1)), Outcome::Status(503));
        assert_eq!(
            (sent.len(), end),
            (1, Decision::GiveUp(GiveUp::MaxAttempts))
        );
    }

    #[test]
    fn huge_exponents_stay_finite() {
        let policy = Redelivery {
            timeout: secs(1),
            schedule: Schedule::Exponential {
                first: secs(1),
                factor: 1e9,
                within: secs(3600),
            },
            max_attempts: 100,
        };
        assert_eq!(policy.wait_before(50), Some(secs(3600)));
        assert_eq!(policy.wait_before(0), None);
    }

    #[test]
    fn values_out_of_bounds_are_refused_with_a_message() {
        let ok = Style::Stripe.redelivery();
        assert_eq!(ok.validate(), Ok(()));
        for s in Style::ALL {
            assert_eq!(s.redelivery().validate(), Ok(()), "{s}");
        }
        let cases = [
            (
                Redelivery {
                    timeout: Duration::ZERO,
                    ..ok.clone()
                },
                "the delivery timeout must be more than zero",
            ),
            (
                Redelivery {
                    max_attempts: 0,
                    ..ok.clone()
                },
                "the maximum number of delivery attempts must be in 1..=100, got 0",
            ),
            (
                Redelivery {
                    schedule: Schedule::Exponential {
                        first: secs(1),
                        factor: 0.5,
                        within: secs(10),
                    },
                    ..ok.clone()
                },
                "a factor of at least 1, got first 1s, factor 0.5, within 10s",
            ),
            (
                Redelivery {
                    schedule: Schedule::Exponential {
                        first: secs(1),
                        factor: f64::NAN,
                        within: secs(10),
                    },
                    ..ok.clone()
                },
                "factor NaN",
            ),
            (
                Redelivery {
                    schedule: Schedule::List(vec![secs(1); 100]),
                    ..ok.clone()
                },
                "a redelivery schedule lists at most 99 waits, got 100",
            ),
        ];
        for (policy, message) in cases {
            let e = policy.validate().unwrap_err().to_string();
            assert!(e.contains(message), "{e}");
        }
    }
}
