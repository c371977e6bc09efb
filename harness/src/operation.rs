//! One logical operation carried out under a retry policy: the one executor of
//! [`retry_policy::Attempts`].
//!
//! The policy decides; this module does — it sends each attempt through a [`Transport`], tells the
//! policy how the attempt ended, sleeps the wait it asks for, and reports every attempt to an
//! [`Observer`]. The load driver (requests rendered from a template, measured by a `Recorder`),
//! the relay tiers (a caller's request forwarded as bytes, counted per tier) and the example
//! service (a payment call) differ only in their transport and their observer.
//!
//! A gRPC call has a policy of its own, gRFC A6's ([`retry_policy::grpc::GrpcCall`]), and is
//! carried out by [`execute_grpc`], beside: A6's hedging sends attempts that overlap, so that
//! executor keeps several in flight, each on a lane (a stream of the worker's connection) of its
//! own, and asks the call what to do whenever one ends or a wait is over.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use history::ErrorKind;
use rand::rngs::StdRng;
use retry_policy::{AttemptOutcome, Attempts, Call, Decision, Limits, Next, OpEnd, Policy};

use crate::http::{AttemptError, Reply};
use futures_util::future::{Fuse, FusedFuture, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use grpc::call::CallResponse;
use history::GrpcCode;
use retry_policy::grpc::{Attempt, CallEnd, GrpcCall, GrpcPolicy, Step, Throttle};
use smallvec::SmallVec;
use std::pin::Pin;

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
    /// A gRPC attempt ended with `code` (told just before [`Observer::attempt`]).
    fn grpc_status(&mut self, _code: GrpcCode) {}
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
    /// A gRPC call's status, which decides its success in place of the HTTP status.
    pub grpc: Option<GrpcCode>,
}

impl OpResult {
    /// Whether the operation succeeded from its caller's point of view: a response below 500
    /// that the breaker's fallback did not stand in for.
    pub fn succeeded(&self) -> bool {
        if let Some(code) = self.grpc {
            return code == GrpcCode::Ok;
        }
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
                    grpc: None,
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
            grpc: None,
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

/// How one gRPC attempt ended, as the executor reports it.
#[derive(Debug, Clone)]
pub struct GrpcAnswer {
    /// The call layer's reading of the answer: its status, messages, commitment and pushback.
    /// Boxed: an answer is moved through every layer of the call (the attempt's future, the
    /// call's select, its last answer, its result), and a box moves as one word where the
    /// reading is some 300 bytes, written each time into state that was cold.
    pub response: Box<CallResponse>,
    /// The HTTP status, when an answer came.
    pub http_status: Option<u16>,
    /// Why no answer came.
    pub error: Option<ErrorKind>,
}

/// How a gRPC call's attempts are sent.
pub trait GrpcTransport: Sync {
    /// What an attempt goes out on: the worker's connection, and one more per hedge in flight.
    type Lane: Send;
    /// A further lane, for an attempt sent while another is outstanding.
    fn spare(&self, first: &Self::Lane) -> Self::Lane;
    /// Sends `attempt` on `lane` and reads its answer within `timeout`; an attempt always ends
    /// in a status.
    fn send<'a>(
        &'a self,
        lane: &'a mut Self::Lane,
        attempt: Attempt,
        timeout: Duration,
    ) -> impl Future<Output = GrpcAnswer> + Send + 'a;
}

/// How a gRPC call ended.
#[derive(Debug, Clone)]
pub struct GrpcResult {
    /// Why the call ended, and with which status.
    pub end: CallEnd,
    /// Attempts sent.
    pub attempts: u32,
    /// The last attempt that answered, when one did.
    pub last: Option<GrpcAnswer>,
}

/// Runs one gRPC call under `policy` (gRFC A6): attempts on `lane` (and, for hedges, on spare
/// lanes of the transport's) as [`GrpcCall`] decides, within the call's `deadline`, each attempt
/// given what is left of it (or `attempt_timeout` when the call has none). Every attempt is
/// reported to `observer` with its gRPC status; a hedge still in flight when the call ends is
/// cancelled and reported with no outcome.
#[allow(clippy::too_many_arguments)]
pub async fn execute_grpc<T: GrpcTransport, O: Observer>(
    transport: &T,
    lane: &mut T::Lane,
    observer: &mut O,
    policy: &GrpcPolicy,
    throttle: Option<&Throttle>,
    deadline: Option<Duration>,
    attempt_timeout: Duration,
    rng: &mut StdRng,
) -> GrpcResult {
    let start = Instant::now();
    let mut call = GrpcCall::start(policy, throttle, deadline, start);
    observer.started();
    let hedges = match policy.strategy {
        retry_policy::grpc::Strategy::Hedging(_) => call.max_attempts().saturating_sub(1),
        _ => 0,
    };
    if hedges == 0 {
        return one_at_a_time(transport, lane, observer, call, attempt_timeout, rng, start).await;
    }
    let mut spares: Vec<T::Lane> = (0..hedges).map(|_| transport.spare(lane)).collect();
    // The first attempt takes the worker's own lane (a burst member's, released with its round).
    // Inline for a call without hedges, as is the list below: a call allocates nothing of its
    // own for either.
    let mut free: SmallVec<[&mut T::Lane; 2]> =
        spares.iter_mut().chain(std::iter::once(lane)).collect();
    let slot = std::pin::pin!(InFlight::slot());
    let mut flying = InFlight::new(slot);
    // (attempt, sent) of each attempt in flight, to report those the end of the call cancels.
    let mut out: SmallVec<[(Attempt, Instant); 2]> = SmallVec::new();
    let mut last: Option<GrpcAnswer> = None;
    let mut now = start;
    loop {
        match call.poll(now) {
            Step::Send(attempt) => {
                let Some(l) = free.pop() else {
                    // More attempts in flight than lanes: the policy broke its own bound.
                    let result =
                        end_grpc(observer, &call, CallEnd::Fatal(GrpcCode::Internal), last);
                    return result;
                };
                let timeout = attempt
                    .timeout
                    .unwrap_or(attempt_timeout)
                    .max(Duration::from_millis(1));
                let sent = Instant::now();
                out.push((attempt, sent));
                flying.push(async move {
                    let answer = transport.send(l, attempt, timeout).await;
                    (attempt, sent, Instant::now(), answer, l)
                });
                now = sent;
            }
            Step::Wait { until } => {
                let ended = match until {
                    Some(at) => tokio::select! {
                        biased;
                        Some(done) = flying.next(), if !flying.is_empty() => Some(done),
                        () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => None,
                    },
                    None => flying.next().await,
                };
                if let Some((attempt, sent, ended, answer, l)) = ended {
                    out.retain(|(a, _)| a.number != attempt.number);
                    let times = (sent, ended);
                    answered(
                        observer,
                        &mut call,
                        attempt,
                        times,
                        &answer,
                        attempt_timeout,
                        rng,
                    );
                    free.push(l);
                    last = Some(answer);
                    now = ended;
                } else if until.is_none() {
                    // Nothing in flight and nothing due: the call cannot go on.
                    return end_grpc(observer, &call, CallEnd::Fatal(GrpcCode::Internal), last);
                } else {
                    now = Instant::now();
                }
            }
            Step::Finish(end) => {
                drop(flying);
                let cancelled = Instant::now();
                for (attempt, sent) in out {
                    abandoned(observer, attempt, sent, cancelled, attempt_timeout);
                }
                return end_grpc(observer, &call, end, last);
            }
        }
    }
}

/// [`execute_grpc`] for a call that never has two attempts out (no hedging): each attempt is
/// awaited where it is made, on the worker's own lane, with the call's steps followed while it is
/// out (its deadline). The same steps, reports and result as the general loop, without its
/// machinery for attempts in flight together, which a call touches on every poll: with hundreds
/// of calls taking turns, each level of state it passes through is read from memory.
#[allow(clippy::too_many_arguments)]
async fn one_at_a_time<T: GrpcTransport, O: Observer>(
    transport: &T,
    lane: &mut T::Lane,
    observer: &mut O,
    mut call: GrpcCall<'_>,
    attempt_timeout: Duration,
    rng: &mut StdRng,
    start: Instant,
) -> GrpcResult {
    let mut last: Option<GrpcAnswer> = None;
    let mut now = start;
    loop {
        let attempt = match call.poll(now) {
            Step::Send(attempt) => attempt,
            Step::Wait { until: Some(at) } => {
                tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                now = Instant::now();
                continue;
            }
            // Nothing in flight and nothing due: the call cannot go on.
            Step::Wait { until: None } => {
                return end_grpc(observer, &call, CallEnd::Fatal(GrpcCode::Internal), last)
            }
            Step::Finish(end) => return end_grpc(observer, &call, end, last),
        };
        let timeout = attempt
            .timeout
            .unwrap_or(attempt_timeout)
            .max(Duration::from_millis(1));
        let sent = Instant::now();
        let mut send = std::pin::pin!(transport.send(lane, attempt, timeout));
        let mut at = sent;
        let answer = loop {
            match call.poll(at) {
                Step::Wait { until: None } => break send.as_mut().await,
                Step::Wait { until: Some(until) } => tokio::select! {
                    biased;
                    answer = send.as_mut() => break answer,
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => {
                        at = Instant::now();
                    }
                },
                // A second attempt while one is out: the policy broke its own bound.
                Step::Send(_) => {
                    return end_grpc(observer, &call, CallEnd::Fatal(GrpcCode::Internal), last)
                }
                Step::Finish(end) => {
                    let cancelled = Instant::now();
                    abandoned(observer, attempt, sent, cancelled, attempt_timeout);
                    return end_grpc(observer, &call, end, last);
                }
            }
        };
        let ended = Instant::now();
        let times = (sent, ended);
        answered(
            observer,
            &mut call,
            attempt,
            times,
            &answer,
            attempt_timeout,
            rng,
        );
        last = Some(answer);
        now = ended;
    }
}

/// Reports attempt `attempt`'s answer, sent and ended at `times`, and gives it to the call.
fn answered<O: Observer>(
    observer: &mut O,
    call: &mut GrpcCall<'_>,
    attempt: Attempt,
    (sent, ended): (Instant, Instant),
    answer: &GrpcAnswer,
    attempt_timeout: Duration,
    rng: &mut StdRng,
) {
    let outcome = answer.response.outcome();
    observer.grpc_status(outcome.code);
    observer.attempt(
        &Call {
            attempt: attempt.number,
            timeout: attempt.timeout.unwrap_or(attempt_timeout),
            fresh_key: None,
        },
        sent,
        ended,
        &AttemptOutcome {
            status: answer.http_status,
            error: answer.error,
            retry_after: None,
        },
    );
    call.on_result(attempt.number, &outcome, ended, rng);
}

/// Reports attempt `attempt`, sent at `sent`, as given up at `cancelled` with no outcome.
fn abandoned<O: Observer>(
    observer: &mut O,
    attempt: Attempt,
    sent: Instant,
    cancelled: Instant,
    attempt_timeout: Duration,
) {
    observer.attempt(
        &Call {
            attempt: attempt.number,
            timeout: attempt.timeout.unwrap_or(attempt_timeout),
            fresh_key: None,
        },
        sent,
        cancelled,
        &AttemptOutcome::default(),
    );
}

fn end_grpc<O: Observer>(
    observer: &mut O,
    call: &GrpcCall<'_>,
    end: CallEnd,
    last: Option<GrpcAnswer>,
) -> GrpcResult {
    let op_end = match end {
        CallEnd::Exhausted(_) => OpEnd::Exhausted,
        CallEnd::Throttled(_) => OpEnd::BudgetRefused,
        CallEnd::DeadlineExceeded => OpEnd::DeadlineExceeded,
        CallEnd::Ok | CallEnd::Fatal(_) | CallEnd::Committed(_) | CallEnd::PushbackStop(_) => {
            OpEnd::Done
        }
    };
    observer.ended(&OpResult {
        end: op_end,
        attempts: call.sent(),
        status: last.as_ref().and_then(|a| a.http_status),
        error: last.as_ref().and_then(|a| a.error),
        reply: None,
        grpc: Some(end.code()),
    });
    GrpcResult {
        end,
        attempts: call.sent(),
        last,
    }
}

/// A call's attempts in flight: one, as a call without hedging always has, polled directly; more
/// (hedged attempts) in a `FuturesUnordered`. That one re-wakes its task every time it has polled
/// all its futures and none was ready (so as not to starve others), so with a single attempt in
/// it every poll of the worker woke the worker again. Over HTTP/2 the workers sharing a
/// connection run in one task, whose pass then ended every other worker, and the connection
/// wrote two requests at a time instead of all that the pass queued.
///
/// The single attempt lives in storage the caller pinned (in its own future's state), not in a
/// box of its own: a call allocates nothing for it. The `FuturesUnordered` is made only when a
/// second attempt overlaps the first: it allocates twice when made, which a call that never
/// hedges should not pay.
struct InFlight<'p, F: Future> {
    one: Pin<&'p mut Fuse<F>>,
    more: Option<FuturesUnordered<F>>,
}

/// Dropping what is in flight cancels it, the attempt in the caller's storage too.
impl<F: Future> Drop for InFlight<'_, F> {
    fn drop(&mut self) {
        self.one.set(Fuse::terminated());
    }
}

impl<'p, F: Future> InFlight<'p, F> {
    /// Attempts in flight, the first of them in `one` (see [`InFlight::slot`]).
    fn new(one: Pin<&'p mut Fuse<F>>) -> Self {
        InFlight { one, more: None }
    }

    /// The storage for the single attempt, to be pinned by the caller.
    fn slot() -> Fuse<F> {
        Fuse::terminated()
    }

    fn push(&mut self, f: F) {
        if self.one.is_terminated() {
            self.one.set(f.fuse());
        } else {
            self.more.get_or_insert_with(FuturesUnordered::new).push(f);
        }
    }

    fn is_empty(&self) -> bool {
        self.one.is_terminated() && self.more.as_ref().is_none_or(FuturesUnordered::is_empty)
    }

    /// The next attempt to end; `None` when none is in flight.
    async fn next(&mut self) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            if !self.one.is_terminated() {
                // A fused future is terminated once it has returned its output.
                if let std::task::Poll::Ready(out) = self.one.as_mut().poll(cx) {
                    return std::task::Poll::Ready(Some(out));
                }
            }
            if let Some(more) = self.more.as_mut().filter(|m| !m.is_empty()) {
                if let std::task::Poll::Ready(Some(out)) = more.poll_next_unpin(cx) {
                    return std::task::Poll::Ready(Some(out));
                }
            }
            if self.is_empty() {
                std::task::Poll::Ready(None)
            } else {
                std::task::Poll::Pending
            }
        })
        .await
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

    /// Counts the wake-ups a task gets.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn one_attempt_in_flight_does_not_wake_its_worker_again() {
        let wakes = std::sync::Arc::new(Wakes(0.into()));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let woken = || wakes.0.load(std::sync::atomic::Ordering::SeqCst);

        let slot = std::pin::pin!(InFlight::slot());
        let mut flying = InFlight::new(slot);
        flying.push(std::future::pending::<u32>());
        {
            let mut next = std::pin::pin!(flying.next());
            assert!(next.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(
            woken(),
            0,
            "a pending attempt woke the worker that polled it"
        );

        // What it replaces: a FuturesUnordered of one pending future wakes its task each time.
        let mut unordered = FuturesUnordered::new();
        unordered.push(std::future::pending::<u32>());
        assert!(unordered.poll_next_unpin(&mut cx).is_pending());
        assert_eq!(woken(), 1);
    }

    #[tokio::test]
    async fn hedged_attempts_in_flight_all_end() {
        let slot = std::pin::pin!(InFlight::slot());
        let mut flying = InFlight::new(slot);
        assert!(flying.is_empty());
        for n in [1u32, 2, 3] {
            flying.push(std::future::ready(n));
        }
        let mut ended = Vec::new();
        while let Some(n) = flying.next().await {
            ended.push(n);
        }
        ended.sort_unstable();
        assert_eq!(ended, [1, 2, 3]);
        assert!(flying.is_empty());
    }

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

    /// A gRPC transport from a script: per attempt number, a status and whether headers came
    /// first, or `None` for an attempt that never answers. Lanes are numbered.
    struct GrpcScript {
        answers: Vec<Option<(GrpcCode, bool)>>,
        asked: std::sync::Mutex<Vec<(u32, Option<u32>, u32)>>,
        spares: std::sync::atomic::AtomicU32,
    }

    impl GrpcTransport for GrpcScript {
        type Lane = u32;

        fn spare(&self, _first: &u32) -> u32 {
            self.spares
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1
        }

        async fn send(&self, lane: &mut u32, attempt: Attempt, _timeout: Duration) -> GrpcAnswer {
            self.asked
                .lock()
                .unwrap()
                .push((attempt.number, attempt.previous_attempts, *lane));
            let Some((code, committed)) = self.answers[attempt.number as usize - 1] else {
                return std::future::pending().await;
            };
            let mut response = CallResponse::failed(grpc::Status::new(code, "scripted"));
            response.trailers_only = !committed;
            GrpcAnswer {
                response: Box::new(response),
                http_status: Some(200),
                error: None,
            }
        }
    }

    #[derive(Default)]
    struct GrpcLog {
        codes: Vec<GrpcCode>,
        attempts: Vec<(u32, Option<u16>)>,
        ended: Option<(OpEnd, Option<GrpcCode>, bool)>,
    }

    impl Observer for GrpcLog {
        fn grpc_status(&mut self, code: GrpcCode) {
            self.codes.push(code);
        }
        fn attempt(&mut self, call: &Call, _: Instant, _: Instant, o: &AttemptOutcome) {
            self.attempts.push((call.attempt, o.status));
        }
        fn ended(&mut self, r: &OpResult) {
            self.ended = Some((r.end, r.grpc, r.succeeded()));
        }
    }

    /// A6 retries of UNAVAILABLE, `max_attempts` in all, 1 ms apart.
    fn retrying_unavailable(max_attempts: u32) -> GrpcPolicy {
        use retry_policy::grpc::{RetryPolicy, Strategy};
        GrpcPolicy {
            strategy: Strategy::Retry(RetryPolicy {
                max_attempts,
                initial_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(1),
                backoff_multiplier: 1.0,
                retryable_status_codes: vec![GrpcCode::Unavailable],
            }),
            conduct: Default::default(),
        }
    }

    fn script(answers: Vec<Option<(GrpcCode, bool)>>) -> GrpcScript {
        GrpcScript {
            answers,
            asked: std::sync::Mutex::new(Vec::new()),
            spares: std::sync::atomic::AtomicU32::new(0),
        }
    }

    #[tokio::test]
    async fn a_grpc_call_retries_as_a6_says_and_stops_once_committed() {
        let policy = retrying_unavailable(4);
        let t = script(vec![
            Some((GrpcCode::Unavailable, false)),
            Some((GrpcCode::Unavailable, true)),
            Some((GrpcCode::Ok, true)),
        ]);
        let (mut lane, mut log, mut rng) = (0, GrpcLog::default(), StdRng::seed_from_u64(1));
        let secs = Duration::from_secs(1);
        let r = execute_grpc(&t, &mut lane, &mut log, &policy, None, None, secs, &mut rng).await;
        assert_eq!(r.end, CallEnd::Committed(GrpcCode::Unavailable));
        assert_eq!(r.attempts, 2);
        assert_eq!(log.codes, [GrpcCode::Unavailable, GrpcCode::Unavailable]);
        assert_eq!(log.attempts, [(1, Some(200)), (2, Some(200))]);
        assert_eq!(
            log.ended,
            Some((OpEnd::Done, Some(GrpcCode::Unavailable), false))
        );
        let asked = t.asked.lock().unwrap().clone();
        assert_eq!(
            asked,
            [(1, None, 0), (2, Some(1), 0)],
            "one lane, counted up"
        );
    }

    #[tokio::test]
    async fn a_call_whose_attempt_outlives_its_deadline_ends_and_gives_the_attempt_up() {
        let policy = retrying_unavailable(3);
        // The first attempt fails, the second never answers: the call's deadline ends it.
        let t = script(vec![Some((GrpcCode::Unavailable, false)), None, None]);
        let (mut lane, mut log, mut rng) = (0, GrpcLog::default(), StdRng::seed_from_u64(1));
        let deadline = Some(Duration::from_millis(40));
        let secs = Duration::from_secs(5);
        let r = execute_grpc(
            &t, &mut lane, &mut log, &policy, None, deadline, secs, &mut rng,
        )
        .await;
        assert_eq!(r.end, CallEnd::DeadlineExceeded);
        assert_eq!(r.attempts, 2);
        assert_eq!(log.codes, [GrpcCode::Unavailable]);
        // The second attempt, still out at the deadline, is reported with no outcome.
        assert_eq!(log.attempts, [(1, Some(200)), (2, None)]);
        assert_eq!(
            log.ended,
            Some((
                OpEnd::DeadlineExceeded,
                Some(GrpcCode::DeadlineExceeded),
                false
            ))
        );
        let asked = t.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 2, "nothing sent after the deadline");
        assert_eq!(
            asked,
            [(1, None, 0), (2, Some(1), 0)],
            "both on the worker's one lane, the retry counting the attempt before it"
        );
    }

    #[tokio::test]
    async fn a_hedged_call_overlaps_its_attempts_and_cancels_the_rest() {
        use retry_policy::grpc::{HedgingPolicy, Strategy};
        let policy = GrpcPolicy {
            strategy: Strategy::Hedging(HedgingPolicy {
                max_attempts: 3,
                hedging_delay: Duration::from_millis(5),
                non_fatal_status_codes: vec![GrpcCode::Unavailable],
            }),
            conduct: Default::default(),
        };
        // The first attempt never answers; the hedge sent after the delay does.
        let t = script(vec![None, Some((GrpcCode::Ok, true)), None]);
        let (mut lane, mut log, mut rng) = (0, GrpcLog::default(), StdRng::seed_from_u64(1));
        let secs = Duration::from_secs(5);
        let r = execute_grpc(&t, &mut lane, &mut log, &policy, None, None, secs, &mut rng).await;
        assert_eq!(r.end, CallEnd::Ok);
        assert_eq!(r.attempts, 2);
        assert_eq!(log.codes, [GrpcCode::Ok]);
        // The hedge answered; the first attempt, still out, was cancelled with no outcome.
        assert_eq!(log.attempts, [(2, Some(200)), (1, None)]);
        assert_eq!(log.ended, Some((OpEnd::Done, Some(GrpcCode::Ok), true)));
        let asked = t.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[0].2, 0, "the first attempt on the worker's own lane");
        assert_ne!(asked[1].2, 0, "the hedge on a lane of its own");
        assert_eq!(asked[1].1, Some(1), "a hedge says how many went before it");
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
