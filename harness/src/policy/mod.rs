//! The client retry policy, built from independent parts (as tower splits retry into a `Policy`
//! and a `Budget`): classify (which failures are transient), [`backoff`], [`jitter`], [`budget`],
//! [`breaker`], a per-attempt and a total timeout, Retry-After, the Idempotency-Key discipline and
//! deadline propagation. A scenario combines them; the relay tiers reuse the same policy.

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod jitter;

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::{HeaderName, HeaderValue};
use rand::rngs::StdRng;
use rand::RngExt;

use crate::http::{AttemptError, Conn, Reply, Target};
use crate::metrics::{AttemptRecord, Recorder};
use crate::template::{RequestTemplate, Vars};
pub use backoff::{Backoff, BackoffKind};
pub use breaker::{Breaker, BreakerSpec, Permit};
pub use budget::{Budget, BudgetSpec};
use history::ErrorKind;
pub use jitter::Jitter;

/// How the Idempotency-Key (`{{key}}`) behaves across attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyMode {
    /// One key per logical operation, reused by every attempt (correct).
    #[default]
    PerOperation,
    /// A new key on every attempt: silently disables idempotency (the bug, for demonstration).
    PerAttempt,
}

/// A resolved policy: every duration already scaled.
#[derive(Debug, Clone)]
pub struct Policy {
    pub max_attempts: u32,
    pub timeout: Duration,
    pub total_timeout: Option<Duration>,
    pub backoff: Backoff,
    pub jitter: Jitter,
    pub retry_statuses: Vec<u16>,
    pub retry_errors: Vec<ErrorKind>,
    pub honor_retry_after: bool,
    /// Retry-After is in scenario seconds; multiplied by the time scale before waiting.
    pub retry_after_scale: f64,
    pub key: KeyMode,
    pub budget: Option<BudgetSpec>,
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
            retry_errors: vec![
                ErrorKind::Connect,
                ErrorKind::Timeout,
                ErrorKind::Reset,
                ErrorKind::Closed,
            ],
            honor_retry_after: true,
            retry_after_scale: 1.0,
            key: KeyMode::PerOperation,
            budget: None,
            breaker: None,
            fallback_status: 503,
            deadline_header: false,
        }
    }
}

impl Policy {
    /// Whether this result is a transient failure worth retrying.
    pub fn retryable(&self, r: &Result<Reply, AttemptError>) -> bool {
        match r {
            Ok(reply) => self.retry_statuses.contains(&reply.status.as_u16()),
            Err(e) => self.retry_errors.contains(&e.kind),
        }
    }
}

/// State a policy shares across the clients of a phase.
#[derive(Debug, Default)]
pub struct Shared {
    pub budget: Option<Mutex<Budget>>,
    pub breaker: Option<Mutex<Breaker>>,
}

impl Shared {
    /// Fresh shared state for `p`.
    pub fn new(p: &Policy) -> Shared {
        Shared {
            budget: p.budget.map(|b| Mutex::new(Budget::new(b))),
            breaker: p.breaker.map(|b| Mutex::new(Breaker::new(b))),
        }
    }
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
}

/// The result of one logical operation.
#[derive(Debug, Clone)]
pub struct OpResult {
    pub end: OpEnd,
    pub attempts: u32,
    /// The last response's status, or the fallback status.
    pub status: Option<u16>,
    pub error: Option<ErrorKind>,
    /// The last response, when there was one.
    pub reply: Option<Reply>,
}

/// Everything one operation needs.
pub struct Operation<'a> {
    pub template: &'a RequestTemplate,
    pub target: &'a Target,
    pub policy: &'a Policy,
    pub shared: &'a Shared,
    pub phase: u16,
    pub op: u64,
    pub client: u32,
    pub round: u64,
    /// The operation's key (burst-shared or fresh).
    pub key: &'a str,
    pub uuid: &'a str,
    /// Extra headers on every attempt (e.g. `x-client-id`).
    pub extra: &'a [(HeaderName, HeaderValue)],
    /// When the run started (attempt records are relative to it).
    pub run_start: Instant,
    /// A burst's release point: the first attempt waits here, ready to send.
    pub release: Option<&'a tokio::sync::Barrier>,
    /// Values captured by earlier phases, for `{{var.NAME}}`.
    pub captured: Option<&'a std::collections::HashMap<String, String>>,
}

fn random_key(rng: &mut StdRng) -> String {
    let v: u128 = rng.random();
    format!("{:032x}", v)
}

/// Runs one logical operation under the policy: attempts, classification, backoff with jitter,
/// Retry-After, budget, breaker, total timeout. Every retry is logged and counted.
pub async fn execute(
    conn: &mut Conn,
    rng: &mut StdRng,
    op: Operation<'_>,
    rec: &mut Recorder,
) -> OpResult {
    let result = attempts(conn, rng, op, rec).await;
    let ok = result.end != OpEnd::Fallback && result.status.is_some_and(|s| s < 500);
    if !ok {
        rec.failed_operations += 1;
    }
    result
}

async fn attempts(
    conn: &mut Conn,
    rng: &mut StdRng,
    op: Operation<'_>,
    rec: &mut Recorder,
) -> OpResult {
    let p = op.policy;
    let start = Instant::now();
    let deadline = p.total_timeout.map(|t| start + t);
    let deadline_unix_ms = p.total_timeout.map(|t| {
        (SystemTime::now() + t)
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    });
    rec.operations += 1;
    if let Some(b) = &op.shared.budget {
        b.lock().unwrap_or_else(|e| e.into_inner()).deposit();
    }
    let mut prev_wait = p.backoff.base;
    let mut last = OpResult {
        end: OpEnd::Exhausted,
        attempts: 0,
        status: None,
        error: None,
        reply: None,
    };
    let mut attempt_key: String;
    for attempt in 1..=p.max_attempts.max(1) {
        let permit = match &op.shared.breaker {
            Some(b) => b
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .permit(Instant::now()),
            None => Permit::Call,
        };
        if permit == Permit::Rejected {
            rec.fallbacks += 1;
            return OpResult {
                end: OpEnd::Fallback,
                attempts: attempt - 1,
                status: Some(p.fallback_status),
                error: None,
                reply: None,
            };
        }
        let key = match p.key {
            KeyMode::PerOperation => op.key,
            KeyMode::PerAttempt if attempt == 1 => op.key,
            KeyMode::PerAttempt => {
                attempt_key = random_key(rng);
                attempt_key.as_str()
            }
        };
        let vars = Vars {
            seq: op.op,
            client: op.client,
            uuid: op.uuid,
            key,
            round: op.round,
            captured: op.captured,
        };
        let mut extra: Vec<(HeaderName, HeaderValue)> = op.extra.to_vec();
        if p.deadline_header {
            if let Some(ms) = deadline_unix_ms {
                extra.push((HeaderName::from_static("x-deadline"), HeaderValue::from(ms)));
            }
        }
        let req = op.template.render(op.target, &vars, &extra);
        let mut timeout = p.timeout;
        if let Some(d) = deadline {
            timeout = timeout.min(d.saturating_duration_since(Instant::now()));
        }
        let t0 = Instant::now();
        let release = if attempt == 1 { op.release } else { None };
        let result = conn.send_released(req, timeout, release).await;
        let t1 = Instant::now();
        let (status, error) = match &result {
            Ok(r) => (Some(r.status.as_u16()), None),
            Err(e) => (None, Some(e.kind)),
        };
        rec.result(status, error);
        if status.is_some() {
            rec.latency(t1 - t0);
        }
        if attempt > 1 {
            rec.retries += 1;
        }
        if let Some(a) = &mut rec.attempts {
            a.push(AttemptRecord {
                phase: op.phase,
                op: op.op,
                attempt,
                client: op.client,
                t_start_us: t0.saturating_duration_since(op.run_start).as_micros() as u64,
                t_end_us: t1.saturating_duration_since(op.run_start).as_micros() as u64,
                status,
                error,
            });
        }
        let transient = p.retryable(&result);
        if let Some(b) = &op.shared.breaker {
            b.lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(t1, permit, !transient);
        }
        let retry_after = result.as_ref().ok().and_then(Reply::retry_after);
        last = OpResult {
            end: OpEnd::Done,
            attempts: attempt,
            status,
            error,
            reply: result.ok(),
        };
        if !transient {
            return last;
        }
        last.end = OpEnd::Exhausted;
        if attempt == p.max_attempts {
            break;
        }
        let mut wait = p.jitter.apply(
            p.backoff.delay(attempt),
            p.backoff.base,
            p.backoff.cap,
            prev_wait,
            rng,
        );
        prev_wait = wait;
        if p.honor_retry_after {
            if let Some(ra) = retry_after {
                wait = wait.max(ra.mul_f64(p.retry_after_scale));
            }
        }
        if deadline.is_some_and(|d| Instant::now() + wait >= d) {
            rec.deadline_exceeded += 1;
            last.end = OpEnd::DeadlineExceeded;
            return last;
        }
        if let Some(b) = &op.shared.budget {
            if !b.lock().unwrap_or_else(|e| e.into_inner()).withdraw() {
                rec.budget_refusals += 1;
                last.end = OpEnd::BudgetRefused;
                return last;
            }
        }
        tracing::debug!(
            op = op.op,
            client = op.client,
            attempt,
            wait_ms = wait.as_secs_f64() * 1000.0,
            status = ?status,
            error = ?error,
            "retrying"
        );
        tokio::time::sleep(wait).await;
    }
    last
}
