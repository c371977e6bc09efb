//! Grouping attempts into logical operations.
//!
//! Why: the server sees requests, but a retry is a client notion — attempt 2 of an operation is just
//! another request unless something ties it to attempt 1. Every retry check (4xx retries, jitter,
//! Retry-After, total timeout) needs that tie, so it is made once, here, and each check sees every
//! entry together with its place in its operation ([`Attempt`]).
//!
//! How attempts are tied, first match wins:
//! 1. a configured operation header (`grouping.header`, e.g. `x-operation-id`): same value, same
//!    operation;
//! 2. the `Idempotency-Key`: same key, same operation (a replay after success included);
//! 3. a fingerprint — `x-client-id` + method + path + `body_sha256` — but only for a request that
//!    follows a *failed* attempt of the same fingerprint within `fingerprint_window_ms`, and not when
//!    an attempt header says it is attempt 1: a client that polls the same URL is not retrying;
//! 4. otherwise the request is an operation of its own.
//!
//! Attempt headers such as `amz-sdk-request: attempt=2; max=3` are read when present and exposed as
//! [`Step::reported_attempt`]; [`Attempt::index`] is always the server-side count (1 = first).
//! The retry delay before attempt k+1 is its `t_recv_us` minus attempt k's `t_done_us`.
//!
//! An operation closes once nothing has touched it for `horizon_ms`; a key that comes back later
//! starts a new operation. Entries must arrive in `seq` order.

use std::fmt;

use history::{Entry, GrpcCode, Outcome};
use serde::{Deserialize, Serialize};

use super::failure;
use super::idle::IdleMap;

/// How requests are grouped into operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GroupingConfig {
    /// A request header naming the operation (lower-case), preferred over everything else.
    pub header: Option<String>,
    /// Group by Idempotency-Key.
    pub by_idempotency_key: bool,
    /// Group by client + method + path + body fingerprint after a failure.
    pub by_fingerprint: bool,
    /// Longest pause after a failed attempt for a same-fingerprint request to count as its retry.
    pub fingerprint_window_ms: u64,
    /// Headers carrying the client's attempt number (`attempt=2; max=3`, or a bare number).
    pub attempt_headers: Vec<String>,
    /// An operation idle for longer than this is closed.
    pub horizon_ms: u64,
}

impl Default for GroupingConfig {
    fn default() -> Self {
        GroupingConfig {
            header: None,
            by_idempotency_key: true,
            by_fingerprint: true,
            fingerprint_window_ms: 60_000,
            attempt_headers: vec!["amz-sdk-request".to_string()],
            horizon_ms: 60_000,
        }
    }
}

/// Client, method, path and body hash: what makes two requests "the same request".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint {
    /// The `x-client-id`.
    pub client: String,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Hex SHA-256 of the body.
    pub body: String,
}

impl Fingerprint {
    /// The fingerprint of `e`, when it has a client id and a body hash.
    pub fn of(e: &Entry) -> Option<Fingerprint> {
        FingerprintRef::of(e).map(FingerprintRef::to_fingerprint)
    }
}

/// A [`Fingerprint`] borrowed from its entry: what lookups use, so that finding a request's
/// operation copies nothing. It hashes exactly as the owned form (same fields, same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FingerprintRef<'a> {
    /// The `x-client-id`.
    pub client: &'a str,
    /// HTTP method.
    pub method: &'a str,
    /// Request path.
    pub path: &'a str,
    /// Hex SHA-256 of the body.
    pub body: &'a str,
}

impl<'a> FingerprintRef<'a> {
    /// The fingerprint of `e`, when it has a client id and a body hash.
    pub fn of(e: &'a Entry) -> Option<FingerprintRef<'a>> {
        Some(FingerprintRef {
            client: e.client_id.as_deref()?,
            method: &e.method,
            path: &e.path,
            body: e.body_sha256.as_deref()?,
        })
    }

    /// The owned fingerprint.
    pub fn to_fingerprint(self) -> Fingerprint {
        Fingerprint {
            client: self.client.to_string(),
            method: self.method.to_string(),
            path: self.path.to_string(),
            body: self.body.to_string(),
        }
    }
}

impl super::idle::Probe<Fingerprint> for FingerprintRef<'_> {
    fn is(&self, fp: &Fingerprint) -> bool {
        self.client == fp.client
            && self.method == fp.method
            && self.path == fp.path
            && self.body == fp.body
    }
    fn to_key(&self) -> Fingerprint {
        self.to_fingerprint()
    }
}

/// What ties the attempts of one operation together.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKey {
    /// The configured operation header's value.
    Header(String),
    /// The Idempotency-Key.
    IdempotencyKey(String),
    /// Same client, method, path and body.
    Fingerprint(Box<Fingerprint>),
    /// Nothing: a one-request operation, named by its `seq`.
    Single(u64),
}

impl fmt::Display for OpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpKey::Header(v) => write!(f, "operation {v}"),
            OpKey::IdempotencyKey(k) => write!(f, "{k}"),
            OpKey::Fingerprint(fp) => {
                let body: String = fp.body.chars().take(12).collect();
                write!(
                    f,
                    "client {} {} {} body {body}",
                    fp.client, fp.method, fp.path
                )
            }
            OpKey::Single(seq) => write!(f, "request #{seq}"),
        }
    }
}

/// The previous attempt of an operation, as far as the retry checks need it.
#[derive(Debug, Clone, PartialEq)]
pub struct Previous {
    /// Its journal `seq`.
    pub seq: u64,
    /// When it arrived (µs since server start).
    pub t_recv_us: u64,
    /// When its response was written or its connection ended (µs since server start).
    pub t_done_us: u64,
    /// Status sent, if any.
    pub status: Option<u16>,
    /// What happened to its connection.
    pub outcome: Outcome,
    /// The schedule rule that fired on it.
    pub rule: Option<String>,
    /// The fault applied to it.
    pub fault: Option<String>,
    /// Retry-After sent with it (seconds), when the journal recorded it.
    pub retry_after_s: Option<f64>,
    /// True when the client saw a failure.
    pub failed: bool,
    /// The client that sent it (`x-client-id`), when it said.
    pub client_id: Option<String>,
    /// It was a gRPC call.
    pub grpc: bool,
    /// The gRPC status it was answered with.
    pub grpc_status: Option<GrpcCode>,
    /// The `grpc-retry-pushback-ms` it was answered with.
    pub pushback_ms: Option<i64>,
    /// Its answer's headers came before its status (gRFC A6: committed).
    pub committed: bool,
    /// Its `grpc-previous-rpc-attempts`.
    pub grpc_previous_attempts: Option<u32>,
}

/// Where one journal entry sits in its operation (owned; see [`Attempt`] for the borrowed view).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Operation id, unique within one run of the checks.
    pub op: u64,
    /// What tied the attempts together.
    pub key: OpKey,
    /// Server-side attempt number, from 1.
    pub index: u32,
    /// Attempt number the client reported in an attempt header.
    pub reported_attempt: Option<u32>,
    /// When the operation's first attempt arrived.
    pub op_started_us: u64,
    /// When the operation's first failed attempt arrived (this one included).
    pub first_failure_us: Option<u64>,
    /// True when this attempt is the operation's first failure.
    pub is_first_failure: bool,
    /// The attempt before this one.
    pub previous: Option<Previous>,
    /// True when this attempt failed.
    pub failed: bool,
}

/// One journal entry with its place in its operation: what every check observes.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The journal entry.
    pub entry: &'a Entry,
    /// Retry-After sent with this entry's response (seconds), when the journal recorded it.
    pub retry_after_s: Option<f64>,
    /// Its place in its operation.
    pub step: &'a Step,
}

impl<'a> Attempt<'a> {
    /// Server-side attempt number, from 1.
    pub fn index(&self) -> u32 {
        self.step.index
    }

    /// The attempt before this one in the same operation.
    pub fn previous(&self) -> Option<&'a Previous> {
        self.step.previous.as_ref()
    }

    /// Retry delay: this arrival minus the previous attempt's end (µs; 0 when they overlap).
    pub fn delay_us(&self) -> Option<u64> {
        self.previous()
            .map(|p| self.entry.t_recv_us.saturating_sub(p.t_done_us))
    }

    /// True when this is a retry: a later attempt after a failed one.
    pub fn is_retry(&self) -> bool {
        self.previous().is_some_and(|p| p.failed)
    }
}

/// An operation that will get no more attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedOperation {
    /// Operation id.
    pub op: u64,
    /// What tied its attempts together.
    pub key: OpKey,
    /// The client that sent it.
    pub client_id: Option<String>,
    /// Number of attempts.
    pub attempts: u32,
    /// `seq` of the first attempt.
    pub first_seq: u64,
    /// `seq` of the last attempt.
    pub last_seq: u64,
    /// When the first attempt arrived (µs).
    pub started_us: u64,
    /// When the last attempt ended (µs).
    pub last_done_us: u64,
    /// True when the last attempt failed.
    pub last_failed: bool,
}

#[derive(Debug)]
struct OpState {
    op: u64,
    started_us: u64,
    first_seq: u64,
    attempts: u32,
    first_failure_us: Option<u64>,
    client_id: Option<String>,
    last: Previous,
    last_done_us: u64,
}

impl OpState {
    fn close(self, key: OpKey) -> ClosedOperation {
        ClosedOperation {
            op: self.op,
            key,
            client_id: self.client_id,
            attempts: self.attempts,
            first_seq: self.first_seq,
            last_seq: self.last.seq,
            started_us: self.started_us,
            last_done_us: self.last_done_us,
            last_failed: self.last.failed,
        }
    }
}

/// Parses an attempt header: `attempt=2; max=3` (as `amz-sdk-request`) or a bare `2`.
pub fn parse_attempt_header(value: &str) -> Option<u32> {
    let value = value.trim();
    if let Ok(n) = value.parse() {
        return Some(n);
    }
    value
        .split([';', ','])
        .filter_map(|part| part.trim().split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("attempt"))
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// Assigns each entry to an operation, streaming, with state only for open operations.
#[derive(Debug)]
pub struct OperationTracker {
    cfg: GroupingConfig,
    window_us: u64,
    open: IdleMap<OpKey, OpState>,
    /// The operation each fingerprint's last request belonged to, when it failed: a retry under a
    /// *new* Idempotency-Key (a client that regenerates its key) still continues that operation.
    failed_by_fingerprint: IdleMap<Fingerprint, (OpKey, u64)>,
    next_op: u64,
    now_us: u64,
    closed: Vec<ClosedOperation>,
}

impl OperationTracker {
    /// A tracker grouping as `cfg` says.
    pub fn new(cfg: &GroupingConfig) -> Self {
        OperationTracker {
            cfg: cfg.clone(),
            window_us: cfg.fingerprint_window_ms.saturating_mul(1000),
            open: IdleMap::new(cfg.horizon_ms.saturating_mul(1000)),
            failed_by_fingerprint: IdleMap::new(cfg.fingerprint_window_ms.saturating_mul(1000)),
            next_op: 1,
            now_us: 0,
            closed: Vec::new(),
        }
    }

    /// Places the next entry (in `seq` order) in its operation.
    pub fn observe(&mut self, e: &Entry, retry_after_s: Option<f64>) -> Step {
        self.now_us = self.now_us.max(e.t_recv_us);
        if e.is_protocol() {
            // A statement or command a protocol-aware proxy read is no request of an operation:
            // it is handed to the checks that read those, and no operation holds it.
            return Step {
                op: self.new_op_id(),
                key: OpKey::Single(e.seq),
                index: 1,
                reported_attempt: None,
                op_started_us: e.t_recv_us,
                first_failure_us: None,
                is_first_failure: false,
                previous: None,
                failed: false,
            };
        }
        let closed = &mut self.closed;
        self.open
            .expire(self.now_us, |key, state| closed.push(state.close(key)));
        self.failed_by_fingerprint.expire(self.now_us, |_, _| {});

        let reported_attempt = self.reported_attempt(e);
        let failed = failure::failed(e);
        let this = Previous {
            seq: e.seq,
            t_recv_us: e.t_recv_us,
            t_done_us: e.t_done_us,
            status: e.status,
            outcome: e.outcome,
            rule: e.rule.clone(),
            fault: e.fault.clone(),
            retry_after_s,
            failed,
            client_id: e.client_id.clone(),
            grpc: e.is_grpc(),
            grpc_status: e.grpc_status,
            pushback_ms: e.pushback_ms,
            committed: e.committed == Some(true),
            grpc_previous_attempts: e.grpc_previous_attempts,
        };
        let Some(key) = self.key_for(e, reported_attempt) else {
            let op = self.new_op_id();
            self.closed.push(ClosedOperation {
                op,
                key: OpKey::Single(e.seq),
                client_id: e.client_id.clone(),
                attempts: 1,
                first_seq: e.seq,
                last_seq: e.seq,
                started_us: e.t_recv_us,
                last_done_us: e.t_done_us,
                last_failed: failed,
            });
            return Step {
                op,
                key: OpKey::Single(e.seq),
                index: 1,
                reported_attempt,
                op_started_us: e.t_recv_us,
                first_failure_us: failed.then_some(e.t_recv_us),
                is_first_failure: failed,
                previous: None,
                failed,
            };
        };

        let next_op = self.next_op;
        let mut created = false;
        // The queue may close an idle operation late; an attempt after the horizon still starts
        // a new one.
        let at_us = e.t_recv_us.max(e.t_done_us);
        let (stale, state) = self.open.touch_fresh(&key, self.now_us, at_us, || {
            created = true;
            OpState {
                op: next_op,
                started_us: e.t_recv_us,
                first_seq: e.seq,
                attempts: 0,
                first_failure_us: None,
                client_id: e.client_id.clone(),
                last: this.clone(),
                last_done_us: e.t_done_us,
            }
        });
        let previous = if created {
            None
        } else {
            Some(std::mem::replace(&mut state.last, this))
        };
        state.attempts += 1;
        state.last_done_us = state.last_done_us.max(e.t_done_us);
        let is_first_failure = failed && state.first_failure_us.is_none();
        if is_first_failure {
            state.first_failure_us = Some(e.t_recv_us);
        }
        let step = Step {
            op: state.op,
            key,
            index: state.attempts,
            reported_attempt,
            op_started_us: state.started_us,
            first_failure_us: state.first_failure_us,
            is_first_failure,
            previous,
            failed,
        };
        if created {
            self.next_op += 1;
        }
        if let Some(old) = stale {
            self.closed.push(old.close(step.key.clone()));
        }
        if let Some(fp) = FingerprintRef::of(e) {
            if failed {
                *self
                    .failed_by_fingerprint
                    .touch(&fp, e.t_done_us.max(e.t_recv_us), || (step.key.clone(), 0)) =
                    (step.key.clone(), e.t_done_us);
            } else {
                self.failed_by_fingerprint.remove(&fp);
            }
        }
        step
    }

    /// Operations still open: the tracker's memory, proportional to operations in progress.
    pub fn open_operations(&self) -> usize {
        self.open.len()
    }

    /// Operations closed since the last call (idle past the horizon, or replaced).
    pub fn take_closed(&mut self) -> Vec<ClosedOperation> {
        std::mem::take(&mut self.closed)
    }

    /// Moves the operations closed since the last call into `into` (which is cleared first).
    pub fn swap_closed(&mut self, into: &mut Vec<ClosedOperation>) {
        into.clear();
        std::mem::swap(&mut self.closed, into);
    }

    /// Closes every operation still open: the journal has ended.
    pub fn finish(mut self) -> Vec<ClosedOperation> {
        let mut closed = std::mem::take(&mut self.closed);
        closed.extend(
            self.open
                .drain()
                .into_iter()
                .map(|(key, state)| state.close(key)),
        );
        closed
    }

    fn new_op_id(&mut self) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        op
    }

    fn reported_attempt(&self, e: &Entry) -> Option<u32> {
        self.cfg
            .attempt_headers
            .iter()
            .find_map(|h| e.headers.get(h).and_then(|v| parse_attempt_header(v)))
    }

    /// The key `e` joins, closing a fingerprint operation it does not continue; `None` for a
    /// request that is an operation of its own.
    fn key_for(&mut self, e: &Entry, reported_attempt: Option<u32>) -> Option<OpKey> {
        if let Some(name) = &self.cfg.header {
            if let Some(v) = e.headers.get(name) {
                return Some(OpKey::Header(v.clone()));
            }
        }
        if self.cfg.by_idempotency_key {
            if let Some(k) = &e.idempotency_key {
                let own = OpKey::IdempotencyKey(k.clone());
                if self.open.get(&own).is_none()
                    && self.cfg.by_fingerprint
                    && reported_attempt != Some(1)
                {
                    // A key never seen before, on a request that repeats a failed one: the client
                    // regenerated its key for a retry. Still the same operation.
                    if let Some(fp) = FingerprintRef::of(e) {
                        if let Some((op_key, done_us)) = self.failed_by_fingerprint.get(&fp) {
                            if e.t_recv_us.saturating_sub(*done_us) <= self.window_us
                                && self.open.get(op_key).is_some()
                            {
                                return Some(op_key.clone());
                            }
                        }
                    }
                }
                return Some(own);
            }
        }
        if !self.cfg.by_fingerprint {
            return None;
        }
        let key = OpKey::Fingerprint(Box::new(Fingerprint::of(e)?));
        let continues = self.open.get(&key).is_some_and(|s| {
            s.last.failed
                && e.t_recv_us.saturating_sub(s.last.t_done_us) <= self.window_us
                && reported_attempt != Some(1)
        });
        if !continues {
            if let Some(state) = self.open.remove(&key) {
                self.closed.push(state.close(key.clone()));
            }
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::entry;

    fn steps(cfg: &GroupingConfig, entries: &[Entry]) -> (Vec<Step>, Vec<ClosedOperation>) {
        let mut t = OperationTracker::new(cfg);
        let mut steps = Vec::new();
        let mut closed = Vec::new();
        for e in entries {
            steps.push(t.observe(e, None));
            closed.extend(t.take_closed());
        }
        closed.extend(t.finish());
        (steps, closed)
    }

    #[test]
    fn parses_attempt_headers() {
        assert_eq!(parse_attempt_header("attempt=2; max=3"), Some(2));
        assert_eq!(parse_attempt_header("max=3; attempt=1"), Some(1));
        assert_eq!(parse_attempt_header(" 4 "), Some(4));
        assert_eq!(
            parse_attempt_header("ttl=20240101T000000Z; attempt=x"),
            None
        );
        assert_eq!(parse_attempt_header(""), None);
    }

    #[test]
    fn same_key_is_one_operation_with_delays() {
        let j = [
            entry(1, 0).key("k").status(503).took(2).build(),
            entry(2, 1).key("other").build(),
            entry(3, 1002).key("k").status(503).took(2).build(),
            entry(4, 3004).key("k").created("o1").build(),
        ];
        let (s, closed) = steps(&GroupingConfig::default(), &j);
        assert_eq!(s[0].index, 1);
        assert!(s[0].is_first_failure);
        assert_eq!(s[2].index, 2);
        assert_eq!(s[2].op, s[0].op);
        assert_ne!(s[1].op, s[0].op);
        assert_eq!(s[3].index, 3);
        assert_eq!(s[3].first_failure_us, Some(0));
        assert!(!s[3].is_first_failure);
        let a = Attempt {
            entry: &j[2],
            retry_after_s: None,
            step: &s[2],
        };
        assert_eq!(a.delay_us(), Some(1_000_000));
        assert!(a.is_retry());
        let k = closed
            .iter()
            .find(|c| c.key == OpKey::IdempotencyKey("k".into()))
            .expect("closed at the end");
        assert_eq!((k.attempts, k.first_seq, k.last_seq), (3, 1, 4));
        assert_eq!(k.last_done_us, 3_005_000);
    }

    #[test]
    fn fingerprint_joins_only_after_a_failure_within_the_window() {
        let same = |seq, t| entry(seq, t).client("c1").body("b1");
        let j = [
            same(1, 0).status(200).build(),
            // Follows a success: a new operation (a poll, not a retry).
            same(2, 100).status(503).build(),
            same(3, 200).status(503).build(),
            // Too late after the failure: new operation.
            same(4, 70_000).status(200).build(),
            // The client says attempt 1: new operation even after a failure.
            same(5, 70_100).status(500).build(),
            same(6, 70_200)
                .header("amz-sdk-request", "attempt=1; max=3")
                .build(),
        ];
        let (s, _) = steps(&GroupingConfig::default(), &j);
        let ops: Vec<u64> = s.iter().map(|s| s.op).collect();
        assert_eq!(ops[1], ops[2], "retry after 503 joins");
        assert_ne!(ops[0], ops[1]);
        assert_ne!(ops[2], ops[3]);
        assert_ne!(ops[4], ops[5]);
        assert_eq!(s[5].reported_attempt, Some(1));
    }

    #[test]
    fn operation_header_wins_and_unkeyed_requests_stand_alone() {
        let cfg = GroupingConfig {
            header: Some("x-operation-id".into()),
            ..GroupingConfig::default()
        };
        let j = [
            entry(1, 0)
                .key("a")
                .header("x-operation-id", "op1")
                .status(503)
                .build(),
            entry(2, 10)
                .key("b")
                .header("x-operation-id", "op1")
                .build(),
            entry(3, 20).build(),
            entry(4, 30).build(),
        ];
        let (s, closed) = steps(&cfg, &j);
        assert_eq!(s[0].op, s[1].op);
        assert_eq!(s[1].key, OpKey::Header("op1".into()));
        assert_ne!(s[2].op, s[3].op);
        assert_eq!(s[2].key, OpKey::Single(3));
        assert_eq!(closed.len(), 3);
    }

    #[test]
    fn idle_operations_close_and_a_late_key_starts_again() {
        let cfg = GroupingConfig {
            horizon_ms: 1000,
            ..GroupingConfig::default()
        };
        let j = [
            entry(1, 0).key("k").status(503).build(),
            entry(2, 500).key("x").build(),
            entry(3, 5000).key("k").build(),
        ];
        let mut t = OperationTracker::new(&cfg);
        let a = t.observe(&j[0], None);
        t.observe(&j[1], None);
        assert!(t.take_closed().is_empty());
        let c = t.observe(&j[2], None);
        let closed = t.take_closed();
        assert_eq!(closed.len(), 2, "k and x idle for more than 1 s");
        assert_ne!(a.op, c.op);
        assert_eq!(c.index, 1);
    }
}
