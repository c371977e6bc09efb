//! The client retry policy, built from independent parts (as tower splits retry into a `Policy`
//! and a `Budget`): classification (which failures are transient), [`backoff`], [`jitter`],
//! Retry-After, a per-attempt and a total timeout, a retry [`budget`] and a circuit [`breaker`]
//! shared by the clients of a phase, the Idempotency-Key discipline and deadline propagation.
//!
//! Why a state machine that only decides: a policy that also sends requests and sleeps can only be
//! tested by running a server and waiting for real time to pass, and each place that needs a
//! retry loop — the load driver, the relay tiers, a service under test — would carry its own copy
//! of the sending. Here [`Attempts`] is told what happened and when ([`Attempts::on_result`]) and
//! answers what to do ([`Decision`]); it reads no clock and opens no socket, so its tests run in
//! virtual time, and one executor (the harness's `operation` module) sends, sleeps and records
//! for every caller.
//!
//! gRPC's clients follow a written contract instead, gRFC A6 — retryable codes, pushback,
//! commitment, throttling, hedging: [`grpc`] plays it, correctly or broken in named ways.

#![warn(missing_docs)]

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod grpc;
pub mod jitter;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use history::ErrorKind;
use rand::rngs::StdRng;
use rand::RngExt;

pub use backoff::{Backoff, BackoffKind};
pub use breaker::{Breaker, BreakerSpec, Permit};
pub use budget::{Budget, BudgetSpec};
pub use jitter::Jitter;

/// How the Idempotency-Key (`{{key}}`) behaves across attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyMode {
    /// One key per logical operation, reused by every attempt (correct).
    #[default]
    PerOperation,
    /// A new key on every attempt: silently disables idempotency (the bug, for demonstration).
    PerAttempt,
}

/// Default of [`Policy::retry_after_max`].
pub const DEFAULT_RETRY_AFTER_MAX: Duration = Duration::from_secs(120);

/// A resolved policy: every duration already scaled.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Attempts per operation, the first included (1 = no retries).
    pub max_attempts: u32,
    /// Limit of one attempt.
    pub timeout: Duration,
    /// Limit of all attempts and waits of one operation.
    pub total_timeout: Option<Duration>,
    /// The wait before each retry, before jitter.
    pub backoff: Backoff,
    /// How the wait is randomized.
    pub jitter: Jitter,
    /// Response statuses worth a retry.
    pub retry_statuses: Vec<u16>,
    /// Failures without a response worth a retry.
    pub retry_errors: Vec<ErrorKind>,
    /// Wait at least as long as the server's Retry-After.
    pub honor_retry_after: bool,
    /// Retry-After is in scenario seconds; multiplied by the time scale before waiting.
    pub retry_after_scale: f64,
    /// The longest Retry-After worth waiting for (in the server's seconds, before scaling): a
    /// server that asks for more is given up on ([`OpEnd::WaitTooLong`]) rather than waited
    /// for, as a user would.
    pub retry_after_max: Duration,
    /// The Idempotency-Key discipline.
    pub key: KeyMode,
    /// A retry budget shared by the clients of a phase.
    pub budget: Option<BudgetSpec>,
    /// A circuit breaker shared by the clients of a phase.
    pub breaker: Option<BreakerSpec>,
    /// Status reported for an operation the open breaker answered with its fallback.
    pub fallback_status: u16,
    /// Send `X-Deadline: <unix ms>` with the operation's absolute deadline.
    pub deadline_header: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_attempts: 1,
            timeout: Duration::from_secs(5),
            total_timeout: None,
            backoff: Backoff {
                kind: BackoffKind::Exponential,
                base: Duration::from_millis(100),
                cap: Duration::from_secs(10),
                factor: 2.0,
            },
            jitter: Jitter::Full,
            retry_statuses: vec![408, 429, 500, 502, 503, 504],
            // `refused`: the server provably did not process the request, so a retry is safe
            // whatever the method (RFC 9113 §8.7).
            retry_errors: vec![
                ErrorKind::Connect,
                ErrorKind::Timeout,
                ErrorKind::Reset,
                ErrorKind::Closed,
                ErrorKind::Refused,
            ],
            honor_retry_after: true,
            retry_after_scale: 1.0,
            retry_after_max: DEFAULT_RETRY_AFTER_MAX,
            key: KeyMode::PerOperation,
            budget: None,
            breaker: None,
            fallback_status: 503,
            deadline_header: false,
        }
    }
}

impl Policy {
    /// Whether an attempt that ended so is a transient failure worth retrying.
    pub fn retryable(&self, outcome: &AttemptOutcome) -> bool {
        match (outcome.status, outcome.error) {
            (Some(s), _) => self.retry_statuses.contains(&s),
            (None, Some(e)) => self.retry_errors.contains(&e),
            (None, None) => false,
        }
    }
}

/// What the clients of one phase (or one relay tier) share: the budget and the breaker.
#[derive(Debug, Default)]
pub struct Limits {
    /// The retry budget, when the policy has one.
    pub budget: Option<Mutex<Budget>>,
    /// The circuit breaker, when the policy has one.
    pub breaker: Option<Mutex<Breaker>>,
    /// gRPC retry throttling's tokens, when the phase's service config has `retryThrottling`
    /// (set by the caller: the HTTP policy knows nothing of it).
    pub grpc_throttle: Option<grpc::Throttle>,
}

impl Limits {
    /// Fresh shared state for `p`, starting at `now`.
    pub fn new(p: &Policy, now: Instant) -> Limits {
        Limits {
            budget: p.budget.map(|b| Mutex::new(Budget::new(b, now))),
            breaker: p.breaker.map(|b| Mutex::new(Breaker::new(b))),
            grpc_throttle: None,
        }
    }
}

/// How an attempt ended, as the policy needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttemptOutcome {
    /// The response's status, when one came.
    pub status: Option<u16>,
    /// Why no response came.
    pub error: Option<ErrorKind>,
    /// The response's Retry-After, as a wait from now.
    pub retry_after: Option<Duration>,
}

/// What to do next in an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Make an attempt now.
    Call(Call),
    /// The breaker is open: make no call; the fallback answers.
    Fallback,
}

/// One attempt to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// How long it may take: the per-attempt timeout, or what is left of the total timeout.
    pub timeout: Duration,
    /// A new Idempotency-Key for this attempt (as 128 random bits), when the key discipline
    /// makes one per attempt; `None` means the operation's key.
    pub fresh_key: Option<u128>,
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait this long, then ask [`Attempts::next`] again.
    Retry(Duration),
    /// The operation is over.
    Stop(OpEnd),
}

/// How a logical operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpEnd {
    /// A response that is not a transient failure (2xx, or a 4xx the policy does not retry).
    Done,
    /// Transient failures until attempts ran out.
    Exhausted,
    /// The total timeout would have passed before the next attempt.
    DeadlineExceeded,
    /// The retry budget refused a retry.
    BudgetRefused,
    /// The breaker was open: the fallback answered, no call was made.
    Fallback,
    /// The server's Retry-After asked for a longer wait than `retry_after_max`.
    WaitTooLong,
}

/// The decisions of one logical operation under a policy.
#[derive(Debug)]
pub struct Attempts<'p> {
    policy: &'p Policy,
    limits: &'p Limits,
    deadline: Option<Instant>,
    /// Attempts made so far.
    made: u32,
    prev_wait: Duration,
    permit: Permit,
}

impl<'p> Attempts<'p> {
    /// An operation starting at `now`: counts it in the budget.
    pub fn start(policy: &'p Policy, limits: &'p Limits, now: Instant) -> Attempts<'p> {
        if let Some(b) = &limits.budget {
            lock(b).deposit();
        }
        Attempts {
            policy,
            limits,
            deadline: policy.total_timeout.map(|t| now + t),
            made: 0,
            prev_wait: policy.backoff.base,
            permit: Permit::Call,
        }
    }

    /// Attempts made so far.
    pub fn made(&self) -> u32 {
        self.made
    }

    /// The next attempt at `now`, unless the breaker is open.
    pub fn next(&mut self, now: Instant, rng: &mut StdRng) -> Next {
        self.permit = match &self.limits.breaker {
            Some(b) => lock(b).permit(now),
            None => Permit::Call,
        };
        if self.permit == Permit::Rejected {
            return Next::Fallback;
        }
        self.made += 1;
        let mut timeout = self.policy.timeout;
        if let Some(d) = self.deadline {
            timeout = timeout.min(d.saturating_duration_since(now));
        }
        let fresh_key =
            (self.policy.key == KeyMode::PerAttempt && self.made > 1).then(|| rng.random::<u128>());
        Next::Call(Call {
            attempt: self.made,
            timeout,
            fresh_key,
        })
    }

    /// The attempt ended at `now` so: retry after a wait, or stop.
    pub fn on_result(
        &mut self,
        outcome: &AttemptOutcome,
        now: Instant,
        rng: &mut StdRng,
    ) -> Decision {
        let p = self.policy;
        let transient = p.retryable(outcome);
        if let Some(b) = &self.limits.breaker {
            lock(b).record(now, self.permit, !transient);
        }
        if !transient {
            return Decision::Stop(OpEnd::Done);
        }
        if self.made >= p.max_attempts.max(1) {
            return Decision::Stop(OpEnd::Exhausted);
        }
        let mut wait = p.jitter.apply(
            p.backoff.delay(self.made),
            p.backoff.base,
            p.backoff.cap,
            self.prev_wait,
            rng,
        );
        self.prev_wait = wait;
        if p.honor_retry_after {
            if let Some(ra) = outcome.retry_after {
                if ra > p.retry_after_max {
                    return Decision::Stop(OpEnd::WaitTooLong);
                }
                let scaled = Duration::try_from_secs_f64(ra.as_secs_f64() * p.retry_after_scale)
                    .unwrap_or(Duration::MAX);
                wait = wait.max(scaled);
            }
        }
        // A wait past the end of time is past any deadline too.
        if self
            .deadline
            .is_some_and(|d| now.checked_add(wait).is_none_or(|then| then >= d))
        {
            return Decision::Stop(OpEnd::DeadlineExceeded);
        }
        if let Some(b) = &self.limits.budget {
            if !lock(b).withdraw(now) {
                return Decision::Stop(OpEnd::BudgetRefused);
            }
        }
        Decision::Retry(wait)
    }
}

/// A poisoned lock still holds consistent counters: every update is a single assignment.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn policy() -> Policy {
        Policy {
            max_attempts: 5,
            timeout: Duration::from_secs(2),
            backoff: Backoff {
                kind: BackoffKind::Exponential,
                base: Duration::from_secs(1),
                cap: Duration::from_secs(60),
                factor: 2.0,
            },
            jitter: Jitter::None,
            ..Policy::default()
        }
    }

    fn status(s: u16) -> AttemptOutcome {
        AttemptOutcome {
            status: Some(s),
            ..AttemptOutcome::default()
        }
    }

    /// Runs an operation in virtual time: each attempt takes 10 ms and ends as `outcomes` says
    /// (the last one repeats). Returns the waits and how it ended.
    fn run(p: &Policy, limits: &Limits, outcomes: &[AttemptOutcome]) -> (Vec<Duration>, OpEnd) {
        let mut rng = StdRng::seed_from_u64(7);
        let mut now = Instant::now();
        let mut op = Attempts::start(p, limits, now);
        let mut waits = Vec::new();
        loop {
            match op.next(now, &mut rng) {
                Next::Fallback => return (waits, OpEnd::Fallback),
                Next::Call(c) => {
                    assert_eq!(c.attempt, op.made());
                    now += Duration::from_millis(10).min(c.timeout);
                    let o = outcomes[(c.attempt as usize - 1).min(outcomes.len() - 1)];
                    match op.on_result(&o, now, &mut rng) {
                        Decision::Retry(w) => {
                            waits.push(w);
                            now += w;
                        }
                        Decision::Stop(end) => return (waits, end),
                    }
                }
            }
        }
    }

    #[test]
    fn the_seeds_schedule_without_jitter_then_exhausted() {
        let p = policy();
        let (waits, end) = run(&p, &Limits::default(), &[status(503)]);
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8]);
        assert_eq!(end, OpEnd::Exhausted);
    }

    #[test]
    fn a_success_or_a_client_error_ends_the_operation() {
        let p = policy();
        assert_eq!(
            run(&p, &Limits::default(), &[status(503), status(201)]),
            (vec![Duration::from_secs(1)], OpEnd::Done)
        );
        let (waits, end) = run(&p, &Limits::default(), &[status(400)]);
        assert!(waits.is_empty(), "a 400 is never retried");
        assert_eq!(end, OpEnd::Done);
        let reset = AttemptOutcome {
            error: Some(ErrorKind::Reset),
            ..AttemptOutcome::default()
        };
        let malformed = AttemptOutcome {
            error: Some(ErrorKind::Malformed),
            ..AttemptOutcome::default()
        };
        assert_eq!(
            run(&p, &Limits::default(), &[reset, status(200)]).0.len(),
            1
        );
        assert_eq!(run(&p, &Limits::default(), &[malformed]).0.len(), 0);
    }

    #[test]
    fn retry_after_is_a_floor_scaled_with_the_scenario() {
        let mut p = policy();
        let throttled = AttemptOutcome {
            status: Some(429),
            retry_after: Some(Duration::from_secs(30)),
            ..AttemptOutcome::default()
        };
        let (waits, _) = run(&p, &Limits::default(), &[throttled, status(200)]);
        assert_eq!(waits, [Duration::from_secs(30)]);
        p.retry_after_scale = 0.1;
        let (waits, _) = run(&p, &Limits::default(), &[throttled, status(200)]);
        assert_eq!(waits, [Duration::from_secs(3)]);
        p.honor_retry_after = false;
        let (waits, _) = run(&p, &Limits::default(), &[throttled, status(200)]);
        assert_eq!(waits, [Duration::from_secs(1)]);
    }

    #[test]
    fn the_total_timeout_stops_before_a_wait_that_would_pass_it_and_caps_an_attempt() {
        let p = Policy {
            total_timeout: Some(Duration::from_millis(3500)),
            ..policy()
        };
        // Waits of 1 s and 2 s fit (3.03 s spent); the 4 s one would not.
        let (waits, end) = run(&p, &Limits::default(), &[status(503)]);
        assert_eq!(waits.len(), 2);
        assert_eq!(end, OpEnd::DeadlineExceeded);
        let limits = Limits::default();
        let mut rng = StdRng::seed_from_u64(1);
        let t0 = Instant::now();
        let mut op = Attempts::start(&p, &limits, t0);
        let Next::Call(c) = op.next(t0 + Duration::from_millis(3000), &mut rng) else {
            panic!("no breaker, so a call");
        };
        assert_eq!(
            c.timeout,
            Duration::from_millis(500),
            "what is left of the total"
        );
    }

    #[test]
    fn a_budget_refuses_retries_beyond_its_share() {
        let p = Policy {
            budget: Some(BudgetSpec::Ratio {
                ratio: 0.1,
                reserve: 0.0,
            }),
            ..policy()
        };
        let limits = Limits::new(&p, Instant::now());
        let ends: Vec<OpEnd> = (0..20)
            .map(|_| run(&p, &limits, &[status(503), status(200)]).1)
            .collect();
        // Every tenth operation has saved enough for one retry.
        assert_eq!(ends.iter().filter(|e| **e == OpEnd::Done).count(), 2);
        assert_eq!(
            ends.iter().filter(|e| **e == OpEnd::BudgetRefused).count(),
            18
        );
    }

    #[test]
    fn an_open_breaker_answers_with_the_fallback() {
        let p = Policy {
            max_attempts: 1,
            breaker: Some(BreakerSpec {
                failure_ratio: 0.5,
                min_requests: 4,
                window: Duration::from_secs(10),
                open_for: Duration::from_secs(5),
                half_open_probes: 1,
            }),
            ..policy()
        };
        let limits = Limits::new(&p, Instant::now());
        let ends: Vec<OpEnd> = (0..6).map(|_| run(&p, &limits, &[status(503)]).1).collect();
        assert_eq!(
            ends,
            [
                OpEnd::Exhausted,
                OpEnd::Exhausted,
                OpEnd::Exhausted,
                OpEnd::Exhausted,
                OpEnd::Fallback,
                OpEnd::Fallback
            ]
        );
    }

    #[test]
    fn a_new_key_per_attempt_only_under_that_discipline() {
        let mut rng = StdRng::seed_from_u64(3);
        let limits = Limits::default();
        let now = Instant::now();
        for (mode, fresh) in [(KeyMode::PerOperation, false), (KeyMode::PerAttempt, true)] {
            let p = Policy {
                key: mode,
                ..policy()
            };
            let mut op = Attempts::start(&p, &limits, now);
            let Next::Call(first) = op.next(now, &mut rng) else {
                panic!("a call")
            };
            assert_eq!(
                first.fresh_key, None,
                "the first attempt uses the operation's key"
            );
            let _ = op.on_result(&status(503), now, &mut rng);
            let Next::Call(second) = op.next(now, &mut rng) else {
                panic!("a call")
            };
            assert_eq!(second.fresh_key.is_some(), fresh, "{mode:?}");
        }
    }

    #[test]
    fn jittered_waits_stay_within_their_bounds() {
        for jitter in [Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
            let p = Policy { jitter, ..policy() };
            let (waits, _) = run(&p, &Limits::default(), &[status(503)]);
            assert_eq!(waits.len(), 4, "{jitter:?}");
            for (i, w) in waits.iter().enumerate() {
                let d = Duration::from_secs(1 << i);
                match jitter {
                    Jitter::Full => assert!(*w <= d),
                    Jitter::Equal => assert!(*w >= d / 2 && *w <= d),
                    _ => assert!(*w >= Duration::from_secs(1)),
                }
            }
        }
    }
}
