//! One logical operation carried out under a retry policy: the one executor of
//! [`retry_policy::Attempts`].
//!
//! The policy decides; this module does — it sends each attempt through a [`Transport`], tells the
//! policy how the attempt ended, sleeps the wait it asks for, and reports every attempt to an
//! [`Observer`]. The load driver (requests rendered from a template, measured by a `Recorder`),
//! the relay tiers (a caller's request forwarded as bytes, counted per tier) and the example
//! service (a payment call) differ only in their transport and their observer.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use history::ErrorKind;
use rand::rngs::StdRng;
use retry_policy::{AttemptOutcome, Attempts, Call, Decision, Limits, Next, OpEnd, Policy};

use crate::http::{AttemptError, Reply};

/// One attempt to send: what the policy decided, and what the operation adds to it.
#[derive(Debug, Clone, Copy)]
pub struct AttemptSpec<'a> {
    /// The attempt's number and timeout.
    pub call: Call,
    /// A new Idempotency-Key for this attempt, when the policy makes one per attempt; `None`
    /// means the operation's own key.
    pub fresh_key: Option<&'a str>,
    /// The operation's absolute deadline (unix ms), when the policy propagates it.
    pub deadline_unix_ms: Option<u64>,
}

/// How an attempt is sent.
pub trait Transport {
    /// Sends one attempt and reads its whole response, within `spec.call.timeout`.
    fn send(
        &mut self,
        spec: AttemptSpec<'_>,
    ) -> impl Future<Output = Result<Reply, AttemptError>> + Send;
}

/// Who is told what happened.
pub trait Observer {
    /// The operation started.
    fn started(&mut self) {}
    /// An attempt was sent at `sent` and ended at `ended` so.
    fn attempt(
        &mut self,
        _call: &Call,
        _sent: Instant,
        _ended: Instant,
        _outcome: &AttemptOutcome,
    ) {
    }
    /// The operation is over.
    fn ended(&mut self, _result: &OpResult) {}
}

/// Nobody is told.
impl Observer for () {}

/// How one logical operation ended.
#[derive(Debug, Clone)]
pub struct OpResult {
    /// Why it stopped.
    pub end: OpEnd,
    /// Attempts made.
    pub attempts: u32,
    /// The last response's status, or the fallback status.
    pub status: Option<u16>,
    /// Why the last attempt got no response.
    pub error: Option<ErrorKind>,
    /// The last response, when there was one.
    pub reply: Option<Reply>,
}

impl OpResult {
    /// Whether the operation succeeded from its caller's point of view: a response below 500
    /// that the breaker's fallback did not stand in for.
    pub fn succeeded(&self) -> bool {
        self.end != OpEnd::Fallback && self.status.is_some_and(|s| s < 500)
    }
}

/// Runs one logical operation: attempts through `transport` as `policy` decides, with the
/// budget and breaker of `limits`. Every attempt and the end are reported to `observer`; every
/// retry is logged (`RUST_LOG=harness=debug`).
pub async fn execute<T: Transport, O: Observer>(
    transport: &mut T,
    observer: &mut O,
    policy: &Policy,
    limits: &Limits,
    rng: &mut StdRng,
) -> OpResult {
    let start = Instant::now();
    let deadline_unix_ms = policy
        .total_timeout
        .filter(|_| policy.deadline_header)
        .map(|t| {
            (SystemTime::now() + t)
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
        });
    let mut op = Attempts::start(policy, limits, start);
    observer.started();
    let mut fresh_key = String::new();
    // The clock is read once per step: at the start, at each attempt's end, after each wait.
    let mut now = start;
    loop {
        let call = match op.next(now, rng) {
            Next::Call(c) => c,
            Next::Fallback => {
                let result = OpResult {
                    end: OpEnd::Fallback,
                    attempts: op.made(),
                    status: Some(policy.fallback_status),
                    error: None,
                    reply: None,
                };
                observer.ended(&result);
                return result;
            }
        };
        if let Some(k) = call.fresh_key {
            fresh_key = format!("{k:032x}");
        }
        let spec = AttemptSpec {
            call,
            fresh_key: call.fresh_key.map(|_| fresh_key.as_str()),
            deadline_unix_ms,
        };
        let sent = now;
        let reply = transport.send(spec).await;
        let ended = Instant::now();
        let outcome = match &reply {
            Ok(r) => AttemptOutcome {
                status: Some(r.status.as_u16()),
                error: None,
                retry_after: r.retry_after(),
            },
            Err(e) => AttemptOutcome {
                status: None,
                error: Some(e.kind),
                retry_after: None,
            },
        };
        observer.attempt(&call, sent, ended, &outcome);
        let decision = op.on_result(&outcome, ended, rng);
        let mut result = OpResult {
            end: OpEnd::Done,
            attempts: call.attempt,
            status: outcome.status,
            error: outcome.error,
            reply: reply.ok(),
        };
        match decision {
            Decision::Stop(end) => {
                result.end = end;
                observer.ended(&result);
                return result;
            }
            Decision::Retry(wait) => {
                tracing::debug!(
                    attempt = call.attempt,
                    wait_ms = wait.as_secs_f64() * 1000.0,
                    status = ?outcome.status,
                    error = ?outcome.error,
                    "retrying"
                );
                sleep(wait).await;
                now = if wait.is_zero() {
                    ended
                } else {
                    Instant::now()
                };
            }
        }
    }
}

async fn sleep(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};
    use rand::SeedableRng;
    use retry_policy::{Backoff, BackoffKind, Jitter, KeyMode};

    /// Answers from a script, recording what it was asked.
    struct Script {
        answers: Vec<Result<u16, ErrorKind>>,
        asked: Vec<(u32, Option<String>, Option<u64>)>,
    }

    impl Transport for Script {
        fn send(
            &mut self,
            spec: AttemptSpec<'_>,
        ) -> impl Future<Output = Result<Reply, AttemptError>> + Send {
            self.asked.push((
                spec.call.attempt,
                spec.fresh_key.map(str::to_string),
                spec.deadline_unix_ms,
            ));
            let i = (spec.call.attempt as usize - 1).min(self.answers.len() - 1);
            let answer = self.answers[i];
            async move {
                match answer {
                    Ok(s) => Ok(Reply {
                        status: StatusCode::from_u16(s).expect("a status"),
                        headers: HeaderMap::new(),
                        body: Bytes::new(),
                        trailers: None,
                    }),
                    Err(kind) => Err(AttemptError {
                        kind,
                        message: "scripted".into(),
                    }),
                }
            }
        }
    }

    #[derive(Default)]
    struct Log {
        started: u32,
        attempts: Vec<(u32, Option<u16>)>,
        ended: Option<OpEnd>,
    }

    impl Observer for Log {
        fn started(&mut self) {
            self.started += 1;
        }
        fn attempt(&mut self, call: &Call, _: Instant, _: Instant, o: &AttemptOutcome) {
            self.attempts.push((call.attempt, o.status));
        }
        fn ended(&mut self, r: &OpResult) {
            self.ended = Some(r.end);
        }
    }

    fn policy() -> Policy {
        Policy {
            max_attempts: 3,
            backoff: Backoff {
                kind: BackoffKind::Fixed,
                base: Duration::from_millis(1),
                cap: Duration::from_millis(1),
                factor: 1.0,
            },
            jitter: Jitter::None,
            ..Policy::default()
        }
    }

    #[tokio::test]
    async fn sends_until_the_policy_stops_and_tells_the_observer_everything() {
        let p = policy();
        let mut t = Script {
            answers: vec![Err(ErrorKind::Reset), Ok(503), Ok(201)],
            asked: Vec::new(),
        };
        let mut log = Log::default();
        let mut rng = StdRng::seed_from_u64(1);
        let r = execute(&mut t, &mut log, &p, &Limits::default(), &mut rng).await;
        assert_eq!((r.end, r.attempts, r.status), (OpEnd::Done, 3, Some(201)));
        assert!(r.succeeded());
        assert_eq!(log.started, 1);
        assert_eq!(log.attempts, [(1, None), (2, Some(503)), (3, Some(201))]);
        assert_eq!(log.ended, Some(OpEnd::Done));
        assert!(t
            .asked
            .iter()
            .all(|(_, key, deadline)| key.is_none() && deadline.is_none()));
    }

    #[tokio::test]
    async fn fresh_keys_and_the_deadline_reach_the_transport() {
        let p = Policy {
            key: KeyMode::PerAttempt,
            total_timeout: Some(Duration::from_secs(5)),
            deadline_header: true,
            ..policy()
        };
        let mut t = Script {
            answers: vec![Ok(503)],
            asked: Vec::new(),
        };
        let mut rng = StdRng::seed_from_u64(1);
        let r = execute(&mut t, &mut (), &p, &Limits::default(), &mut rng).await;
        assert_eq!(r.end, OpEnd::Exhausted);
        assert!(!r.succeeded());
        assert_eq!(t.asked.len(), 3);
        assert_eq!(
            t.asked[0].1, None,
            "the first attempt keeps the operation's key"
        );
        let (k2, k3) = (t.asked[1].1.clone(), t.asked[2].1.clone());
        assert!(k2.as_ref().is_some_and(|k| k.len() == 32) && k2 != k3);
        let deadline = t.asked[0].2.expect("a deadline");
        assert!(
            t.asked.iter().all(|a| a.2 == Some(deadline)),
            "one deadline per operation"
        );
    }
}
