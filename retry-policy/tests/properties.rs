//! Whatever the policy (within the scenario's bounds) and whatever the server answers, an
//! operation ends: within its attempts, before its total timeout, and with waits that can be
//! waited — a hostile Retry-After included.

use std::time::{Duration, Instant};

use history::ErrorKind;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use retry_policy::{
    AttemptOutcome, Attempts, Backoff, BackoffKind, Decision, Jitter, Limits, Next, OpEnd, Policy,
};

const DAY_MS: u64 = 86_400_000;

fn policy() -> impl Strategy<Value = Policy> {
    (
        1u32..=100,
        1u64..=366 * DAY_MS,
        proptest::option::of(1u64..=366 * DAY_MS),
        (0u64..=366 * DAY_MS, 0u64..=366 * DAY_MS, any::<f64>()),
        prop_oneof![
            Just(BackoffKind::Fixed),
            Just(BackoffKind::Linear),
            Just(BackoffKind::Exponential)
        ],
        prop_oneof![
            Just(Jitter::None),
            Just(Jitter::Full),
            Just(Jitter::Equal),
            Just(Jitter::Decorrelated)
        ],
        any::<bool>(),
        1e-3f64..=1e3,
        0u64..=3_600_000,
    )
        .prop_map(
            |(
                attempts,
                timeout,
                total,
                (base, cap, factor),
                kind,
                jitter,
                honor,
                scale,
                ra_max,
            )| {
                Policy {
                    max_attempts: attempts,
                    timeout: Duration::from_millis(timeout),
                    total_timeout: total.map(Duration::from_millis),
                    backoff: Backoff {
                        kind,
                        base: Duration::from_millis(base),
                        cap: Duration::from_millis(cap),
                        factor,
                    },
                    jitter,
                    honor_retry_after: honor,
                    retry_after_scale: scale,
                    retry_after_max: Duration::from_millis(ra_max),
                    ..Policy::default()
                }
            },
        )
}

fn outcome() -> impl Strategy<Value = AttemptOutcome> {
    (
        proptest::option::of(100u16..600),
        proptest::option::of(0usize..ErrorKind::ALL.len()),
        // Any Retry-After a server can send, seconds up to u64::MAX.
        proptest::option::of(any::<u64>().prop_map(Duration::from_secs)),
    )
        .prop_map(|(status, error, retry_after)| AttemptOutcome {
            status,
            error: if status.is_none() {
                error.map(|i| ErrorKind::ALL[i])
            } else {
                None
            },
            retry_after,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_operation_ends_within_its_attempts_and_its_deadline(
        p in policy(),
        outcomes in proptest::collection::vec(outcome(), 1..120),
        seed in any::<u64>(),
    ) {
        let limits = Limits::new(&p, Instant::now());
        let mut rng = StdRng::seed_from_u64(seed);
        let start = Instant::now();
        let deadline = p.total_timeout.map(|t| start + t);
        let mut now = start;
        let mut op = Attempts::start(&p, &limits, now);
        let mut calls = 0u32;
        let end = loop {
            let call = match op.next(now, &mut rng) {
                Next::Call(call) => call,
                Next::Fallback => return Err(TestCaseError::fail("no breaker, so no fallback")),
            };
            calls += 1;
            prop_assert_eq!(call.attempt, calls);
            prop_assert!(calls <= p.max_attempts, "attempt {} of {}", calls, p.max_attempts);
            prop_assert!(call.timeout <= p.timeout);
            if let Some(d) = deadline {
                prop_assert!(now + call.timeout <= d, "an attempt may not outlive the deadline");
            }
            // The attempt takes a millisecond of its timeout.
            now += call.timeout.min(Duration::from_millis(1));
            let o = outcomes[(calls as usize - 1) % outcomes.len()];
            match op.on_result(&o, now, &mut rng) {
                Decision::Retry(wait) => {
                    prop_assert!(p.retryable(&o), "only a transient failure is retried");
                    let then = now.checked_add(wait);
                    prop_assert!(then.is_some(), "a wait that cannot be waited: {:?}", wait);
                    if let (true, Some(ra)) = (p.honor_retry_after, o.retry_after) {
                        prop_assert!(ra <= p.retry_after_max);
                        prop_assert!(
                            wait.as_secs_f64() >= ra.as_secs_f64() * p.retry_after_scale * 0.999,
                            "Retry-After honoured"
                        );
                    }
                    now += wait;
                    if let Some(d) = deadline {
                        prop_assert!(now < d, "a retry after the deadline");
                    }
                }
                Decision::Stop(end) => break end,
            }
        };
        match end {
            OpEnd::Exhausted => prop_assert_eq!(calls, p.max_attempts),
            OpEnd::DeadlineExceeded => prop_assert!(deadline.is_some()),
            OpEnd::WaitTooLong => prop_assert!(p.honor_retry_after),
            OpEnd::Done => {}
            OpEnd::BudgetRefused | OpEnd::Fallback => {
                return Err(TestCaseError::fail("no budget, no breaker"))
            }
        }
    }
}
