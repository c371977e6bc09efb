//! gRPC's own retry contract, gRFC A6, as a state machine: the retry policy (`retryPolicy`), the
//! hedging policy (`hedgingPolicy`), retry throttling (`retryThrottling`), server pushback
//! (`grpc-retry-pushback-ms`), commitment, `grpc-previous-rpc-attempts` and the one deadline of a
//! call — each rule documented with the sentence of A6 it comes from.
//!
//! Why a machine of its own beside [`crate::Attempts`]: an HTTP client's policy is whatever its
//! library chose, so the HTTP machine is built from parts a scenario combines. A gRPC client's
//! policy is written down: A6 says what a correct client does after every status, and the harness
//! must be able to play that client — and, to prove that the checks catch them, the broken ones.
//! So the correct behaviour is the default and every way of breaking it is a named field of
//! [`Conduct`], never a hidden switch. Hedging sends attempts that overlap, so the machine is
//! polled ([`GrpcCall::poll`]) rather than asked once per result: it says what to send, until
//! when to wait, or that the call is over; the executor sends, waits and reports each attempt's
//! end ([`GrpcCall::on_result`]).
//!
//! Like the rest of the crate it reads no clock: every method is given `now`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use history::GrpcCode;
use rand::rngs::StdRng;
use rand::RngExt;
use serde::Deserialize;

/// The client-side cap on `maxAttempts`.
///
/// A6: "`maxAttempts` in both `retryPolicy` and `hedgingPolicy` have, by default, a client-side
/// maximum value of 5. [...] Service owners may specify a higher value for these parameters, but
/// higher values will be treated as equal to the maximum value by the client implementation."
pub const MAX_ATTEMPTS_CAP: u32 = 5;

/// A validated `retryPolicy`, durations already scaled.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// `maxAttempts` as configured (at least 2); [`Conduct::attempts`] decides whether the cap of
    /// 5 applies.
    pub max_attempts: u32,
    /// `initialBackoff`: the wait before the first retry, before jitter.
    pub initial_backoff: Duration,
    /// `maxBackoff`: the longest wait before jitter.
    pub max_backoff: Duration,
    /// `backoffMultiplier`: the growth of the wait per retry.
    pub backoff_multiplier: f64,
    /// `retryableStatusCodes`.
    pub retryable_status_codes: Vec<GrpcCode>,
}

/// A validated `hedgingPolicy`, durations already scaled.
#[derive(Debug, Clone, PartialEq)]
pub struct HedgingPolicy {
    /// `maxAttempts` as configured (at least 2): the original and the hedges.
    pub max_attempts: u32,
    /// `hedgingDelay`: the time between one attempt and the next.
    pub hedging_delay: Duration,
    /// `nonFatalStatusCodes`.
    pub non_fatal_status_codes: Vec<GrpcCode>,
}

/// What a method's config asks for: no retries, a retry policy or a hedging policy.
///
/// A6: "An individual RPC may be governed by a retry policy or a hedge policy, but not both."
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Strategy {
    /// Neither policy: every call is one attempt.
    #[default]
    Single,
    /// Retry failed attempts.
    Retry(RetryPolicy),
    /// Send hedged attempts.
    Hedging(HedgingPolicy),
}

/// A validated `retryThrottling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleSpec {
    /// `maxTokens`, in (0, 1000].
    pub max_tokens: u32,
    /// `tokenRatio` in thousandths: A6 "Decimal places beyond 3 are ignored".
    pub token_ratio_milli: u32,
}

/// How the client plays A6. [`Conduct::default`] is the correct client; each other variant is
/// a known way of getting A6 wrong, for demonstrating that the checks catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Conduct {
    /// How many attempts a call may make.
    pub attempts: AttemptsConduct,
    /// Which failed attempts are retried (or hedged on).
    pub codes: CodesConduct,
    /// The randomness of the backoff.
    pub jitter: GrpcJitter,
    /// What `grpc-retry-pushback-ms` does.
    pub pushback: PushbackConduct,
    /// Whether a call that received response headers is retried.
    pub committed: CommittedConduct,
    /// Whether retry throttling can stop retries and hedges.
    pub throttling: ThrottlingConduct,
    /// What `grpc-previous-rpc-attempts` says.
    pub previous_attempts: PreviousAttemptsConduct,
    /// Whether the deadline covers the call or each attempt.
    pub deadline: DeadlineConduct,
}

/// How many attempts a call may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptsConduct {
    /// `maxAttempts`, at most [`MAX_ATTEMPTS_CAP`] (A6).
    #[default]
    Capped,
    /// `maxAttempts` as configured, however many (broken: more than 5 attempts).
    Uncapped,
}

/// Which failed attempts are retried (or hedged on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodesConduct {
    /// Only `retryableStatusCodes` (or `nonFatalStatusCodes` when hedging) (A6).
    #[default]
    Policy,
    /// Every status but OK (broken: retries INVALID_ARGUMENT, NOT_FOUND, …).
    AnyFailure,
}

/// The randomness of a retry's wait `d = min(initialBackoff × backoffMultiplier^(n-1),
/// maxBackoff)` before the n-th retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrpcJitter {
    /// `d × random(0.8, 1.2)`. A6 (as revised in 2024): "the `n`-th attempt will occur after
    /// `min(initialBackoff*backoffMultiplier**(n-1), maxBackoff) * random(0.8, 1.2))`".
    #[default]
    Proportional,
    /// `random(0, d)`. A6 as first published (2017): "the `n`-th attempt will occur at
    /// `random(0, min(initialBackoff*backoffMultiplier**(n-1), maxBackoff))`"; some clients
    /// still draw so.
    Full,
    /// Exactly `d` (broken: every client that failed together retries together).
    None,
}

/// What `grpc-retry-pushback-ms` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PushbackConduct {
    /// As A6 says (see [`Pushback`]).
    #[default]
    Honor,
    /// As if the server had sent none (broken: retries sooner, and after a "do not retry").
    Ignore,
}

/// Whether a call that received response headers is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommittedConduct {
    /// A committed call is never retried (A6).
    #[default]
    Respect,
    /// It is retried like any other (broken).
    Ignore,
}

/// Whether retry throttling can stop retries and hedges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ThrottlingConduct {
    /// The tokens are counted and obeyed (A6).
    #[default]
    Respect,
    /// The tokens are counted but never stop a retry (broken).
    Ignore,
}

/// What `grpc-previous-rpc-attempts` says on each attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PreviousAttemptsConduct {
    /// Absent on the first attempt, then 1, 2, … (A6).
    #[default]
    Count,
    /// Never sent (broken).
    Omit,
    /// 1 on every retry (broken: does not count up).
    AlwaysOne,
}

/// Whether the deadline covers the call or each attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeadlineConduct {
    /// One deadline across all attempts (A6).
    #[default]
    Call,
    /// A fresh deadline for every attempt (broken: attempts go on after the call's deadline).
    PerAttempt,
}

/// A method's policy as a client plays it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GrpcPolicy {
    /// Retry, hedging or neither.
    pub strategy: Strategy,
    /// Correct, or broken in named ways.
    pub conduct: Conduct,
}

/// What the server said about retrying, from `grpc-retry-pushback-ms`.
///
/// A6: "The value is to be an ASCII encoded signed 32-bit integer with no unnecessary leading
/// zeros that represents how many milliseconds to wait before sending a retry. If the value for
/// pushback is negative or unparseble, then it will be seen as the server asking the client not
/// to retry at all."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry after exactly this long.
    After(Duration),
    /// Do not retry (a negative or unparseable value).
    Stop,
}

/// How one attempt ended, as the policy needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcOutcome {
    /// The status: the server's, or the one the client made of a transport failure.
    pub code: GrpcCode,
    /// Response-Headers came before the status (not a Trailers-Only response).
    pub committed: bool,
    /// `grpc-retry-pushback-ms`, when the server sent it.
    pub pushback: Option<Pushback>,
}

impl GrpcOutcome {
    /// A Trailers-Only answer with `code` and no pushback.
    pub fn status(code: GrpcCode) -> GrpcOutcome {
        GrpcOutcome {
            code,
            committed: false,
            pushback: None,
        }
    }
}

/// Retry throttling's tokens, shared by every call to one server.
///
/// A6: "For each server name, the gRPC client maintains a `token_count` variable which is
/// initially set to `maxTokens` and can take values between `0` and `maxTokens`. [...] Every
/// failed RPC will decrement the `token_count` by 1. Every successful RPC will increment the
/// `token_count` by `tokenRatio`. If `token_count` is less than or equal to the threshold,
/// defined to be `(maxTokens / 2)`, then RPCs will not be retried until `token_count` rises over
/// the threshold."
///
/// Kept in thousandths of a token, so that ten successes at 0.1 are exactly one token.
#[derive(Debug)]
pub struct Throttle {
    max_milli: u64,
    ratio_milli: u64,
    milli: Mutex<u64>,
}

impl Throttle {
    /// Full tokens (`maxTokens`).
    pub fn new(spec: ThrottleSpec) -> Throttle {
        let max_milli = u64::from(spec.max_tokens) * 1000;
        Throttle {
            max_milli,
            ratio_milli: u64::from(spec.token_ratio_milli),
            milli: Mutex::new(max_milli),
        }
    }

    /// The tokens now.
    pub fn tokens(&self) -> f64 {
        *lock(&self.milli) as f64 / 1000.0
    }

    /// Whether a retry or a hedge may be sent: `token_count > maxTokens / 2`.
    pub fn allows(&self) -> bool {
        *lock(&self.milli) * 2 > self.max_milli
    }

    /// A failed attempt: one token less. Returns whether retries are now throttled.
    pub fn on_failure(&self) -> bool {
        let mut m = lock(&self.milli);
        *m = m.saturating_sub(1000);
        *m * 2 <= self.max_milli
    }

    /// A successful call: `tokenRatio` more, up to `maxTokens`.
    pub fn on_success(&self) {
        let mut m = lock(&self.milli);
        *m = (*m + self.ratio_milli).min(self.max_milli);
    }
}

/// One attempt to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the original, then 2, 3, ….
    pub number: u32,
    /// The value of `grpc-previous-rpc-attempts`, when it is sent.
    ///
    /// A6: "This value represents the number of preceding retry attempts. Thus, it will not be
    /// present on the first RPC, will be 1 for the second RPC, and so on."
    pub previous_attempts: Option<u32>,
    /// What is left of the deadline (sent as `grpc-timeout`), when the call has one.
    pub timeout: Option<Duration>,
}

/// What to do next in a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send this attempt now, then poll again.
    Send(Attempt),
    /// Nothing to send before `until` (`None`: not before an outstanding attempt ends); poll
    /// again then, or as soon as an attempt ends ([`GrpcCall::on_result`]).
    Wait {
        /// When something is next due: a retry, a hedge or the deadline.
        until: Option<Instant>,
    },
    /// The call is over: cancel any attempt still outstanding.
    Finish(CallEnd),
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// An attempt answered OK.
    Ok,
    /// A status the policy does not retry (or no policy at all).
    Fatal(GrpcCode),
    /// Retryable statuses until the attempts ran out.
    Exhausted(GrpcCode),
    /// A failure after response headers: the call was committed.
    Committed(GrpcCode),
    /// The server's pushback said not to retry.
    PushbackStop(GrpcCode),
    /// Retry throttling refused the retry.
    Throttled(GrpcCode),
    /// The call's deadline passed.
    DeadlineExceeded,
}

impl CallEnd {
    /// The status the application sees.
    pub fn code(self) -> GrpcCode {
        match self {
            CallEnd::Ok => GrpcCode::Ok,
            CallEnd::DeadlineExceeded => GrpcCode::DeadlineExceeded,
            CallEnd::Fatal(c)
            | CallEnd::Exhausted(c)
            | CallEnd::Committed(c)
            | CallEnd::PushbackStop(c)
            | CallEnd::Throttled(c) => c,
        }
    }
}

/// The decisions of one gRPC call under a policy.
#[derive(Debug)]
pub struct GrpcCall<'p> {
    policy: &'p GrpcPolicy,
    throttle: Option<&'p Throttle>,
    /// The call's timeout, for [`DeadlineConduct::PerAttempt`].
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    /// Attempts sent so far.
    sent: u32,
    /// Attempts sent whose end has not been reported.
    outstanding: u32,
    /// When the next attempt is due; `None` when none will be sent unless a result says so.
    next_at: Option<Instant>,
    /// No further attempt will be sent (pushback said stop, throttled, attempts used up); the
    /// call ends so once no attempt is outstanding.
    closed: Option<CallEnd>,
    /// Retries since the last pushback: the `n` of the backoff.
    backoff_n: u32,
    /// The status of the last failed attempt, for the end of a hedged call.
    last_failure: Option<GrpcCode>,
    end: Option<CallEnd>,
}

impl<'p> GrpcCall<'p> {
    /// A call starting at `now` with `timeout` (its deadline), the first attempt due at once.
    ///
    /// A6: "gRPC's call deadline applies across all attempts for a given RPC."
    pub fn start(
        policy: &'p GrpcPolicy,
        throttle: Option<&'p Throttle>,
        timeout: Option<Duration>,
        now: Instant,
    ) -> GrpcCall<'p> {
        GrpcCall {
            policy,
            throttle,
            timeout,
            deadline: match policy.conduct.deadline {
                DeadlineConduct::Call => timeout.and_then(|t| now.checked_add(t)),
                DeadlineConduct::PerAttempt => None,
            },
            sent: 0,
            outstanding: 0,
            next_at: Some(now),
            closed: None,
            backoff_n: 0,
            last_failure: None,
            end: None,
        }
    }

    /// Attempts sent so far.
    pub fn sent(&self) -> u32 {
        self.sent
    }

    /// The most attempts this call may make.
    pub fn max_attempts(&self) -> u32 {
        let configured = match &self.policy.strategy {
            Strategy::Single => 1,
            Strategy::Retry(r) => r.max_attempts,
            Strategy::Hedging(h) => h.max_attempts,
        };
        match self.policy.conduct.attempts {
            AttemptsConduct::Capped => configured.min(MAX_ATTEMPTS_CAP),
            AttemptsConduct::Uncapped => configured,
        }
        .max(1)
    }

    /// What to do at `now`.
    pub fn poll(&mut self, now: Instant) -> Step {
        if let Some(end) = self.end {
            return Step::Finish(end);
        }
        if self.deadline.is_some_and(|d| now >= d) {
            return self.finish(CallEnd::DeadlineExceeded);
        }
        if let Some(at) = self.next_at.filter(|_| self.closed.is_none()) {
            if at <= now {
                if self.sent > 0 && !self.throttle_allows() {
                    // A6: "Neither retry attempts or hedged RPCs block when `token_count` is
                    // less than or equal to the threshold. Retry attempts are canceled and the
                    // failure returned to the client application. The hedged request is
                    // cancelled, and if there are no other already-sent hedged RPCs the failure
                    // is returned to the client application."
                    let code = self.last_failure.unwrap_or(GrpcCode::Unavailable);
                    self.stop_sending(CallEnd::Throttled(code));
                    if let Some(end) = self.end {
                        return Step::Finish(end);
                    }
                } else {
                    return Step::Send(self.send(now));
                }
            }
        }
        let due = self.next_at.filter(|_| self.closed.is_none());
        let until = match (due, self.deadline) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, d) => a.or(d),
        };
        Step::Wait { until }
    }

    fn send(&mut self, now: Instant) -> Attempt {
        self.sent += 1;
        self.outstanding += 1;
        self.next_at = match &self.policy.strategy {
            // A6: "When a method has chosen a `hedgingPolicy`, the original RPC is sent
            // immediately [...]. After `hedgingDelay` has elapsed without a successful
            // response, the second RPC will be issued. If neither RPC has received a response
            // after `hedgingDelay` has elapsed again, a third RPC is sent, and so on, up to
            // `maxAttempts`."
            Strategy::Hedging(h) if self.sent < self.max_attempts() => {
                Some(now.checked_add(h.hedging_delay).unwrap_or(now))
            }
            _ => None,
        };
        let previous_attempts = match (self.policy.conduct.previous_attempts, self.sent) {
            (_, 1) | (PreviousAttemptsConduct::Omit, _) => None,
            (PreviousAttemptsConduct::Count, n) => Some(n - 1),
            (PreviousAttemptsConduct::AlwaysOne, _) => Some(1),
        };
        let timeout = match self.deadline {
            Some(d) => Some(d.saturating_duration_since(now)),
            None => self.timeout,
        };
        Attempt {
            number: self.sent,
            previous_attempts,
            timeout,
        }
    }

    /// Attempt `number` ended at `now` with `outcome`; `rng` draws the backoff's jitter.
    pub fn on_result(
        &mut self,
        number: u32,
        outcome: &GrpcOutcome,
        now: Instant,
        rng: &mut StdRng,
    ) {
        if self.end.is_some() || number == 0 || number > self.sent || self.outstanding == 0 {
            return;
        }
        self.outstanding -= 1;
        let conduct = self.policy.conduct;
        let code = outcome.code;
        if code == GrpcCode::Ok {
            if let Some(t) = self.throttle {
                t.on_success();
            }
            self.finish(CallEnd::Ok);
            return;
        }
        let pushback = match conduct.pushback {
            PushbackConduct::Honor => outcome.pushback,
            PushbackConduct::Ignore => None,
        };
        let retryable = match (&self.policy.strategy, conduct.codes) {
            (Strategy::Single, _) => false,
            (_, CodesConduct::AnyFailure) => true,
            (Strategy::Retry(r), CodesConduct::Policy) => r.retryable_status_codes.contains(&code),
            (Strategy::Hedging(h), CodesConduct::Policy) => {
                h.non_fatal_status_codes.contains(&code)
            }
        };
        // A6: "The only RPCs that are counted as failures for the throttling policy are RPCs
        // that fail with a status code that qualifies as a retryable or non-fatal status code,
        // or that receive a pushback response indicating not to retry."
        let throttled = match self.throttle {
            Some(t) if retryable || pushback == Some(Pushback::Stop) => {
                t.on_failure() && conduct.throttling == ThrottlingConduct::Respect
            }
            _ => false,
        };
        self.last_failure = Some(code);
        if let Some(end) = self.closed {
            // No further attempt: a hedge still outstanding may yet succeed (above) or fail
            // fatally (below); otherwise the call ends as it was closed once none is left.
            if !retryable {
                self.finish(CallEnd::Fatal(code));
            } else if self.outstanding == 0 {
                self.finish(end);
            }
            return;
        }
        if !retryable {
            // A6, hedging: "If any other status code is received, all outstanding RPCs are
            // canceled and the error is returned to the client application layer."
            self.finish(CallEnd::Fatal(code));
            return;
        }
        if outcome.committed && conduct.committed == CommittedConduct::Respect {
            // A6: "An RPC becomes *committed* [when] the client receives Response-Headers."
            // "For retriable RPCs, when an RPC becomes committed, the client will continue
            // with the currently in-flight attempt but will not make any subsequent attempts".
            self.finish(CallEnd::Committed(code));
            return;
        }
        if pushback == Some(Pushback::Stop) {
            // A6, summary: "Pushback: Don't Retry — Retry policy: Don't retry, return failure
            // to client application. Hedging policy: Don't send any more hedged requests."
            self.stop_sending(CallEnd::PushbackStop(code));
            return;
        }
        if throttled {
            self.stop_sending(CallEnd::Throttled(code));
            return;
        }
        if self.sent >= self.max_attempts() {
            // A6: "In all cases, if the maximum number of retry attempts or the maximum number
            // of hedged requests is reached, no further RPCs are sent."
            self.stop_sending(CallEnd::Exhausted(code));
            return;
        }
        match &self.policy.strategy {
            Strategy::Single => {
                self.finish(CallEnd::Fatal(code));
            }
            Strategy::Retry(r) => {
                let wait = match pushback {
                    // A6: "When a client receives an explicit pushback response from a server,
                    // and it is appropriate to retry the RPC, it will retry after exactly that
                    // delay. For subsequent retries, the delay period will be reset to the
                    // `initialBackoff` setting".
                    Some(Pushback::After(d)) => {
                        self.backoff_n = 0;
                        d
                    }
                    _ => {
                        self.backoff_n += 1;
                        backoff(r, self.backoff_n, conduct.jitter, rng)
                    }
                };
                self.next_at = Some(now.checked_add(wait).unwrap_or(far_future(now)));
            }
            Strategy::Hedging(_) => {
                // A6: "If a non-fatal status code is received from a hedged request, then the
                // next hedged request in line is sent immediately, shortcutting its hedging
                // delay." — "If the pushback says to retry after a given delay, the next
                // hedged request (if any) will be issued after the given delay has elapsed."
                let wait = match pushback {
                    Some(Pushback::After(d)) => d,
                    _ => Duration::ZERO,
                };
                self.next_at = Some(now.checked_add(wait).unwrap_or(far_future(now)));
            }
        }
    }

    /// No further attempt; the call ends with `end` once no attempt is outstanding.
    fn stop_sending(&mut self, end: CallEnd) {
        self.closed = Some(end);
        self.next_at = None;
        if self.outstanding == 0 {
            self.finish(end);
        }
    }

    fn finish(&mut self, end: CallEnd) -> Step {
        self.end = Some(end);
        self.next_at = None;
        Step::Finish(end)
    }

    fn throttle_allows(&self) -> bool {
        self.policy.conduct.throttling == ThrottlingConduct::Ignore
            || self.throttle.is_none_or(Throttle::allows)
    }
}

/// The wait before the `n`-th retry (1 = the first): `min(initialBackoff ×
/// backoffMultiplier^(n-1), maxBackoff)`, jittered as `jitter` says.
pub fn backoff(p: &RetryPolicy, n: u32, jitter: GrpcJitter, rng: &mut StdRng) -> Duration {
    let exp = i32::try_from(n.max(1) - 1).unwrap_or(i32::MAX);
    let grown = p.initial_backoff.as_secs_f64() * p.backoff_multiplier.powi(exp);
    let d = grown.min(p.max_backoff.as_secs_f64());
    let u: f64 = rng.random();
    let secs = match jitter {
        GrpcJitter::Proportional => d * (0.8 + 0.4 * u),
        GrpcJitter::Full => d * u,
        GrpcJitter::None => d,
    };
    Duration::try_from_secs_f64(secs).unwrap_or(p.max_backoff)
}

/// A time no call lives to see, for a wait too long to add to `now`.
fn far_future(now: Instant) -> Instant {
    let year = Duration::from_secs(365 * 86_400);
    now.checked_add(year).unwrap_or(now)
}

/// A poisoned lock still holds a consistent count: every update is a single assignment.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use GrpcCode::*;

    fn retry(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            backoff_multiplier: 2.0,
            retryable_status_codes: vec![Unavailable],
        }
    }

    fn hedging(max_attempts: u32, delay_ms: u64) -> HedgingPolicy {
        HedgingPolicy {
            max_attempts,
            hedging_delay: Duration::from_millis(delay_ms),
            non_fatal_status_codes: vec![Unavailable, Internal],
        }
    }

    fn policy(strategy: Strategy) -> GrpcPolicy {
        GrpcPolicy {
            strategy,
            conduct: Conduct::default(),
        }
    }

    /// One attempt as the virtual executor saw it.
    #[derive(Debug, Clone, PartialEq)]
    struct Sent {
        at_ms: u64,
        attempt: Attempt,
    }

    /// Runs a call in virtual time. `answer(n)` gives attempt n's outcome and how many ms after
    /// its sending it comes (`None`: it never answers). Returns what was sent and how it ended.
    fn run(
        p: &GrpcPolicy,
        throttle: Option<&Throttle>,
        timeout: Option<Duration>,
        answer: impl Fn(u32) -> Option<(u64, GrpcOutcome)>,
    ) -> (Vec<Sent>, CallEnd) {
        let mut rng = StdRng::seed_from_u64(11);
        let t0 = Instant::now();
        let mut now = t0;
        let mut call = GrpcCall::start(p, throttle, timeout, now);
        let mut sent = Vec::new();
        // (due, attempt number, outcome)
        let mut pending: Vec<(Instant, u32, GrpcOutcome)> = Vec::new();
        for _ in 0..1000 {
            match call.poll(now) {
                Step::Send(a) => {
                    sent.push(Sent {
                        at_ms: (now - t0).as_millis() as u64,
                        attempt: a,
                    });
                    if let Some((ms, o)) = answer(a.number) {
                        pending.push((now + Duration::from_millis(ms), a.number, o));
                    }
                }
                Step::Finish(end) => return (sent, end),
                Step::Wait { until } => {
                    pending.sort_by_key(|p| p.0);
                    let next_answer = pending.first().map(|p| p.0);
                    let wake = match (until, next_answer) {
                        (Some(u), Some(a)) => u.min(a),
                        (u, a) => u.or(a).expect("a call that waits for nothing"),
                    };
                    now = now.max(wake);
                    while pending.first().is_some_and(|p| p.0 <= now) {
                        let (_, n, o) = pending.remove(0);
                        call.on_result(n, &o, now, &mut rng);
                    }
                }
            }
        }
        panic!("the call did not end in 1000 steps");
    }

    fn times(sent: &[Sent]) -> Vec<u64> {
        sent.iter().map(|s| s.at_ms).collect()
    }

    fn status(code: GrpcCode) -> Option<(u64, GrpcOutcome)> {
        Some((10, GrpcOutcome::status(code)))
    }

    #[test]
    fn without_a_policy_a_call_is_one_attempt() {
        let (sent, end) = run(&policy(Strategy::Single), None, None, |_| {
            status(Unavailable)
        });
        assert_eq!(sent.len(), 1);
        assert_eq!(end, CallEnd::Fatal(Unavailable));
    }

    #[test]
    fn retryable_codes_are_retried_until_max_attempts_and_others_never() {
        let p = policy(Strategy::Retry(retry(3)));
        let (sent, end) = run(&p, None, None, |_| status(Unavailable));
        assert_eq!(sent.len(), 3);
        assert_eq!(end, CallEnd::Exhausted(Unavailable));
        let (sent, end) = run(&p, None, None, |_| status(InvalidArgument));
        assert_eq!(
            sent.len(),
            1,
            "INVALID_ARGUMENT is not in retryableStatusCodes"
        );
        assert_eq!(end, CallEnd::Fatal(InvalidArgument));
        let (sent, end) = run(&p, None, None, |n| {
            status(if n < 2 { Unavailable } else { Ok })
        });
        assert_eq!(sent.len(), 2);
        assert_eq!(end, CallEnd::Ok);
        assert_eq!(end.code(), Ok);
    }

    #[test]
    fn max_attempts_is_capped_at_five_unless_the_client_is_broken() {
        let mut p = policy(Strategy::Retry(retry(9)));
        let (sent, _) = run(&p, None, None, |_| status(Unavailable));
        assert_eq!(sent.len(), 5);
        p.conduct.attempts = AttemptsConduct::Uncapped;
        let (sent, end) = run(&p, None, None, |_| status(Unavailable));
        assert_eq!(sent.len(), 9);
        assert_eq!(end, CallEnd::Exhausted(Unavailable));
    }

    #[test]
    fn the_backoff_grows_by_the_multiplier_up_to_max_backoff_with_jitter_of_a_fifth() {
        let mut p = policy(Strategy::Retry(RetryPolicy {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(300),
            max_backoff: Duration::from_millis(1000),
            ..retry(5)
        }));
        p.conduct.attempts = AttemptsConduct::Uncapped;
        p.conduct.jitter = GrpcJitter::None;
        let (sent, _) = run(&p, None, None, |_| status(Unavailable));
        // Each answer takes 10 ms; waits of 300, 600, 1000 (capped), 1000.
        assert_eq!(times(&sent), [0, 310, 920, 1930, 2940]);
        let r = retry(5);
        let mut rng = StdRng::seed_from_u64(5);
        for n in 1..=6u32 {
            let d = (100.0 * 2f64.powi(n as i32 - 1)).min(1000.0);
            for _ in 0..200 {
                let w = backoff(&r, n, GrpcJitter::Proportional, &mut rng).as_secs_f64() * 1e3;
                assert!(w >= 0.8 * d - 1e-6 && w <= 1.2 * d + 1e-6, "n={n}: {w} ms");
                let w = backoff(&r, n, GrpcJitter::Full, &mut rng).as_secs_f64() * 1e3;
                assert!((0.0..=d + 1e-6).contains(&w), "n={n}: {w} ms");
            }
        }
    }

    #[test]
    fn the_jitter_draws_differ_between_clients() {
        let r = retry(5);
        let mut rng = StdRng::seed_from_u64(9);
        let draws: Vec<Duration> = (0..50)
            .map(|_| backoff(&r, 1, GrpcJitter::Proportional, &mut rng))
            .collect();
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert!(distinct.len() > 40, "{draws:?}");
    }

    #[test]
    fn pushback_is_waited_exactly_and_resets_the_backoff() {
        let mut p = policy(Strategy::Retry(RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            ..retry(5)
        }));
        p.conduct.jitter = GrpcJitter::None;
        let pushed = GrpcOutcome {
            pushback: Some(Pushback::After(Duration::from_millis(2500))),
            ..GrpcOutcome::status(Unavailable)
        };
        let (sent, end) = run(&p, None, None, |n| match n {
            1 | 2 => status(Unavailable),
            3 => Some((10, pushed)),
            _ => status(Unavailable),
        });
        // 100, 200, then exactly 2500, then 100 again (reset), then 200.
        assert_eq!(times(&sent), [0, 110, 320, 2830, 2940]);
        assert_eq!(end, CallEnd::Exhausted(Unavailable));
    }

    #[test]
    fn a_negative_or_unparseable_pushback_stops_the_retries() {
        let p = policy(Strategy::Retry(retry(5)));
        let stop = GrpcOutcome {
            pushback: Some(Pushback::Stop),
            ..GrpcOutcome::status(Unavailable)
        };
        let (sent, end) = run(&p, None, None, |_| Some((10, stop)));
        assert_eq!(sent.len(), 1);
        assert_eq!(end, CallEnd::PushbackStop(Unavailable));
        let mut broken = p.clone();
        broken.conduct.pushback = PushbackConduct::Ignore;
        let (sent, end) = run(&broken, None, None, |_| Some((10, stop)));
        assert_eq!(
            sent.len(),
            5,
            "a client that ignores pushback retries anyway"
        );
        assert_eq!(end, CallEnd::Exhausted(Unavailable));
    }

    #[test]
    fn a_pushback_does_not_raise_max_attempts() {
        let p = policy(Strategy::Retry(retry(2)));
        let pushed = GrpcOutcome {
            pushback: Some(Pushback::After(Duration::from_millis(5))),
            ..GrpcOutcome::status(Unavailable)
        };
        let (sent, end) = run(&p, None, None, |_| Some((10, pushed)));
        assert_eq!(sent.len(), 2);
        assert_eq!(end, CallEnd::Exhausted(Unavailable));
    }

    #[test]
    fn a_committed_call_is_not_retried_but_a_trailers_only_one_is() {
        let p = policy(Strategy::Retry(retry(5)));
        let after_headers = GrpcOutcome {
            committed: true,
            ..GrpcOutcome::status(Unavailable)
        };
        let (sent, end) = run(&p, None, None, |_| Some((10, after_headers)));
        assert_eq!(sent.len(), 1);
        assert_eq!(end, CallEnd::Committed(Unavailable));
        let (sent, _) = run(&p, None, None, |_| status(Unavailable));
        assert_eq!(
            sent.len(),
            5,
            "Trailers-Only answers leave the call uncommitted"
        );
        let mut broken = p.clone();
        broken.conduct.committed = CommittedConduct::Ignore;
        let (sent, _) = run(&broken, None, None, |_| Some((10, after_headers)));
        assert_eq!(sent.len(), 5);
    }

    #[test]
    fn grpc_previous_rpc_attempts_counts_the_attempts_before() {
        let mut p = policy(Strategy::Retry(retry(4)));
        let values = |p: &GrpcPolicy| {
            run(p, None, None, |_| status(Unavailable))
                .0
                .iter()
                .map(|s| s.attempt.previous_attempts)
                .collect::<Vec<_>>()
        };
        assert_eq!(values(&p), [None, Some(1), Some(2), Some(3)]);
        p.conduct.previous_attempts = PreviousAttemptsConduct::Omit;
        assert_eq!(values(&p), [None, None, None, None]);
        p.conduct.previous_attempts = PreviousAttemptsConduct::AlwaysOne;
        assert_eq!(values(&p), [None, Some(1), Some(1), Some(1)]);
    }

    #[test]
    fn one_deadline_covers_every_attempt_and_wait() {
        let mut p = policy(Strategy::Retry(RetryPolicy {
            initial_backoff: Duration::from_millis(400),
            max_backoff: Duration::from_secs(10),
            ..retry(5)
        }));
        p.conduct.jitter = GrpcJitter::None;
        let (sent, end) = run(&p, None, Some(Duration::from_secs(1)), |_| {
            status(Unavailable)
        });
        // 0 and 410 fit in the second; the retry due at 1220 does not.
        assert_eq!(times(&sent), [0, 410]);
        assert_eq!(end, CallEnd::DeadlineExceeded);
        let remaining: Vec<_> = sent.iter().map(|s| s.attempt.timeout).collect();
        assert_eq!(
            remaining,
            [
                Some(Duration::from_secs(1)),
                Some(Duration::from_millis(590))
            ],
            "grpc-timeout carries what is left of the deadline"
        );
        p.conduct.deadline = DeadlineConduct::PerAttempt;
        let (sent, end) = run(&p, None, Some(Duration::from_secs(1)), |_| {
            status(Unavailable)
        });
        assert_eq!(
            sent.len(),
            5,
            "a fresh deadline per attempt goes on past the call's"
        );
        assert!(sent
            .iter()
            .all(|s| s.attempt.timeout == Some(Duration::from_secs(1))));
        assert_eq!(end, CallEnd::Exhausted(Unavailable));
    }

    #[test]
    fn an_attempt_that_never_answers_ends_at_the_deadline() {
        let p = policy(Strategy::Retry(retry(5)));
        let (sent, end) = run(&p, None, Some(Duration::from_millis(300)), |_| None);
        assert_eq!(sent.len(), 1);
        assert_eq!(end, CallEnd::DeadlineExceeded);
    }

    #[test]
    fn the_throttle_counts_in_thousandths_and_blocks_at_half() {
        let t = Throttle::new(ThrottleSpec {
            max_tokens: 10,
            token_ratio_milli: 100,
        });
        assert!(t.allows());
        for _ in 0..4 {
            assert!(!t.on_failure());
        }
        assert!(t.on_failure(), "10 - 5 = 5 <= 10/2");
        assert!(!t.allows());
        for _ in 0..10 {
            t.on_success();
        }
        assert_eq!(
            t.tokens(),
            6.0,
            "ten successes at 0.1 are one token exactly"
        );
        assert!(t.allows());
        for _ in 0..100 {
            t.on_success();
        }
        assert_eq!(t.tokens(), 10.0, "never above maxTokens");
        for _ in 0..100 {
            t.on_failure();
        }
        assert_eq!(t.tokens(), 0.0, "never below 0");
    }

    #[test]
    fn throttling_stops_retries_and_hedges_when_tokens_run_low() {
        let t = Throttle::new(ThrottleSpec {
            max_tokens: 4,
            token_ratio_milli: 1000,
        });
        let p = policy(Strategy::Retry(retry(5)));
        // Tokens 4 → 3 (retry allowed) → 2 (2 <= 4/2: throttled).
        let (sent, end) = run(&p, Some(&t), None, |_| status(Unavailable));
        assert_eq!(sent.len(), 2);
        assert_eq!(end, CallEnd::Throttled(Unavailable));
        // A first attempt is always sent, and a non-retryable failure costs no token.
        let (sent, end) = run(&p, Some(&t), None, |_| status(NotFound));
        assert_eq!((sent.len(), end), (1, CallEnd::Fatal(NotFound)));
        assert_eq!(t.tokens(), 2.0);
        let (sent, end) = run(&p, Some(&t), None, |_| status(Unavailable));
        assert_eq!((sent.len(), end), (1, CallEnd::Throttled(Unavailable)));
        // A broken client counts but does not obey.
        let mut broken = p.clone();
        broken.conduct.throttling = ThrottlingConduct::Ignore;
        let (sent, _) = run(&broken, Some(&t), None, |_| status(Unavailable));
        assert_eq!(sent.len(), 5);
        // Hedges are throttled too: with no tokens, only the original goes out.
        let h = policy(Strategy::Hedging(hedging(4, 100)));
        let (sent, end) = run(&h, Some(&t), None, |_| {
            Some((1000, GrpcOutcome::status(Unavailable)))
        });
        assert_eq!(sent.len(), 1);
        assert_eq!(end, CallEnd::Throttled(Unavailable));
        // Successes refill it.
        let (_, end) = run(&p, Some(&t), None, |_| status(Ok));
        assert_eq!(end, CallEnd::Ok);
        assert_eq!(t.tokens(), 1.0);
    }

    #[test]
    fn hedges_go_out_every_hedging_delay_until_the_first_success() {
        let p = policy(Strategy::Hedging(hedging(4, 100)));
        // The original is slow; the second answers OK 150 ms after it was sent.
        let (sent, end) = run(&p, None, None, |n| match n {
            2 => Some((150, GrpcOutcome::status(Ok))),
            _ => Some((10_000, GrpcOutcome::status(Unavailable))),
        });
        assert_eq!(times(&sent), [0, 100, 200]);
        assert_eq!(end, CallEnd::Ok);
        let previous: Vec<_> = sent.iter().map(|s| s.attempt.previous_attempts).collect();
        assert_eq!(previous, [None, Some(1), Some(2)]);
    }

    #[test]
    fn a_non_fatal_status_sends_the_next_hedge_at_once_and_a_fatal_one_ends_the_call() {
        let p = policy(Strategy::Hedging(hedging(5, 1000)));
        let (sent, end) = run(&p, None, None, |n| match n {
            1 => Some((30, GrpcOutcome::status(Unavailable))),
            2 => Some((20, GrpcOutcome::status(Internal))),
            _ => Some((5000, GrpcOutcome::status(Ok))),
        });
        // 30: the first fails → the second at once; 50: it fails → the third at once; then
        // the fourth after a full hedging delay.
        assert_eq!(times(&sent), [0, 30, 50, 1050, 2050]);
        assert_eq!(end, CallEnd::Ok);
        let (sent, end) = run(&p, None, None, |n| match n {
            1 => Some((1500, GrpcOutcome::status(PermissionDenied))),
            _ => Some((10_000, GrpcOutcome::status(Ok))),
        });
        assert_eq!(times(&sent), [0, 1000]);
        assert_eq!(end, CallEnd::Fatal(PermissionDenied));
    }

    #[test]
    fn a_hedged_call_whose_attempts_all_fail_is_not_retried() {
        let p = policy(Strategy::Hedging(hedging(3, 0)));
        let (sent, end) = run(&p, None, None, |_| {
            Some((50, GrpcOutcome::status(Unavailable)))
        });
        assert_eq!(
            times(&sent),
            [0, 0, 0],
            "a hedging delay of 0 sends all at once"
        );
        assert_eq!(end, CallEnd::Exhausted(Unavailable));
    }

    #[test]
    fn pushback_on_a_hedge_delays_or_stops_the_next() {
        let p = policy(Strategy::Hedging(hedging(4, 1000)));
        let after = GrpcOutcome {
            pushback: Some(Pushback::After(Duration::from_millis(300))),
            ..GrpcOutcome::status(Unavailable)
        };
        let (sent, _) = run(&p, None, None, |n| match n {
            1 => Some((100, after)),
            _ => Some((10_000, GrpcOutcome::status(Ok))),
        });
        // The first fails at 100 asking for 300 ms: the second at 400, then every 1000.
        assert_eq!(times(&sent), [0, 400, 1400, 2400]);
        let stop = GrpcOutcome {
            pushback: Some(Pushback::Stop),
            ..GrpcOutcome::status(Unavailable)
        };
        let (sent, end) = run(&p, None, None, |n| match n {
            2 => Some((10, stop)),
            _ => Some((3000, GrpcOutcome::status(Unavailable))),
        });
        // The second's stop at 1010 ends the hedging: no third; the original still answers.
        assert_eq!(times(&sent), [0, 1000]);
        assert_eq!(end, CallEnd::PushbackStop(Unavailable));
    }

    #[test]
    fn a_hedged_call_that_committed_sends_no_more_hedges() {
        let p = policy(Strategy::Hedging(hedging(4, 100)));
        let committed = GrpcOutcome {
            committed: true,
            ..GrpcOutcome::status(Unavailable)
        };
        let (sent, end) = run(&p, None, None, |_| Some((50, committed)));
        assert_eq!(sent.len(), 1);
        assert_eq!(end, CallEnd::Committed(Unavailable));
    }

    #[test]
    fn a_broken_client_retries_any_failure() {
        let mut p = policy(Strategy::Retry(retry(3)));
        p.conduct.codes = CodesConduct::AnyFailure;
        let (sent, end) = run(&p, None, None, |_| status(InvalidArgument));
        assert_eq!(sent.len(), 3);
        assert_eq!(end, CallEnd::Exhausted(InvalidArgument));
    }

    #[test]
    fn late_or_unknown_results_change_nothing() {
        let p = policy(Strategy::Retry(retry(3)));
        let mut rng = StdRng::seed_from_u64(1);
        let now = Instant::now();
        let mut call = GrpcCall::start(&p, None, None, now);
        call.on_result(1, &GrpcOutcome::status(Ok), now, &mut rng);
        assert!(
            matches!(call.poll(now), Step::Send(_)),
            "attempt 1 was never sent"
        );
        call.on_result(7, &GrpcOutcome::status(Ok), now, &mut rng);
        assert_eq!(call.poll(now), Step::Wait { until: None });
        call.on_result(1, &GrpcOutcome::status(Ok), now, &mut rng);
        call.on_result(1, &GrpcOutcome::status(Unavailable), now, &mut rng);
        assert_eq!(call.poll(now), Step::Finish(CallEnd::Ok));
    }

    fn any_outcome() -> impl proptest::strategy::Strategy<Value = (u64, GrpcOutcome)> {
        use proptest::prelude::*;
        (
            0u64..3000,
            0u8..17,
            any::<bool>(),
            prop_oneof![
                Just(None),
                Just(Some(Pushback::Stop)),
                (0u64..5000).prop_map(|ms| Some(Pushback::After(Duration::from_millis(ms)))),
            ],
        )
            .prop_map(|(ms, code, committed, pushback)| {
                let code = GrpcCode::from_number(u64::from(code)).unwrap_or(Unknown);
                (
                    ms,
                    GrpcOutcome {
                        code,
                        committed,
                        pushback,
                    },
                )
            })
    }

    proptest::proptest! {
        /// Whatever the server answers, a correct client makes at most 5 attempts, sends none
        /// after the deadline, counts `grpc-previous-rpc-attempts` up from nothing, never sends
        /// after an OK, a committed failure or a pushback that said stop, and the call ends.
        #[test]
        fn a_correct_client_keeps_every_rule_of_a6(
            hedge in proptest::bool::ANY,
            max_attempts in 2u32..12,
            delay_ms in 0u64..2000,
            timeout_ms in proptest::option::of(1u64..20_000),
            answers in proptest::collection::vec(any_outcome(), 1..12),
        ) {
            let strategy = if hedge {
                Strategy::Hedging(HedgingPolicy { max_attempts, ..hedging(2, delay_ms) })
            } else {
                Strategy::Retry(RetryPolicy { max_attempts, ..retry(2) })
            };
            let p = policy(strategy);
            let timeout = timeout_ms.map(Duration::from_millis);
            let (sent, end) = run(&p, None, timeout, |n| {
                answers.get(n as usize - 1).copied().or(answers.last().copied())
            });
            proptest::prop_assert!(!sent.is_empty() && sent.len() <= 5);
            for (i, s) in sent.iter().enumerate() {
                let expected = if i == 0 { None } else { Some(i as u32) };
                proptest::prop_assert_eq!(s.attempt.previous_attempts, expected);
                if let Some(t) = timeout_ms {
                    proptest::prop_assert!(s.at_ms < t, "attempt at {} ms, deadline {} ms", s.at_ms, t);
                }
            }
            if !hedge {
                // One at a time: each attempt after one whose answer allowed a retry.
                for (i, s) in sent.iter().enumerate().skip(1) {
                    let (ms, prev) = answers.get(i - 1).copied().unwrap_or(answers[answers.len() - 1]);
                    proptest::prop_assert!(prev.code == Unavailable && !prev.committed);
                    proptest::prop_assert!(prev.pushback != Some(Pushback::Stop));
                    if let Some(Pushback::After(d)) = prev.pushback {
                        proptest::prop_assert_eq!(s.at_ms, sent[i - 1].at_ms + ms + d.as_millis() as u64);
                    }
                }
            }
            if end == CallEnd::Ok {
                proptest::prop_assert!(answers.iter().take(sent.len()).any(|a| a.1.code == Ok) || answers.last().is_some_and(|a| a.1.code == Ok));
            }
        }
    }

    #[test]
    fn the_conduct_reads_from_yaml_names() {
        let c: Conduct = serde_json::from_str(
            r#"{"attempts": "uncapped", "codes": "any_failure", "jitter": "none",
                "pushback": "ignore", "committed": "ignore", "throttling": "ignore",
                "previous_attempts": "always_one", "deadline": "per_attempt"}"#,
        )
        .unwrap();
        assert_eq!(c.attempts, AttemptsConduct::Uncapped);
        assert_eq!(c.deadline, DeadlineConduct::PerAttempt);
        assert_eq!(
            serde_json::from_str::<Conduct>("{}").unwrap(),
            Conduct::default()
        );
        assert!(serde_json::from_str::<Conduct>(r#"{"jiter": "none"}"#).is_err());
    }
}
