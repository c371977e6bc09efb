//! What every connection of a running fault server shares: the clock, the arrival counter, the
//! schedule in force, the attempt count per Idempotency-Key, the journal and the orders store.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http::HeaderName;

use crate::config::RuleConfig;
use crate::journal::{Clock, Journal, Sequencer};
use crate::orders::{Orders, SharedCounters, StoreError};
use crate::schedule::Schedule;

/// Headers always copied into the journal.
pub const DEFAULT_CAPTURED_HEADERS: &[&str] = &[
    "idempotency-key",
    "x-client-id",
    "x-request-id",
    "x-deadline",
    "user-agent",
    "amz-sdk-request",
    "amz-sdk-invocation-id",
    "x-attempt",
    "x-retry-attempt",
    "traceparent",
];

/// Default cap on a `hang`.
pub const DEFAULT_HANG_CAP: Duration = Duration::from_secs(30);

/// The limits in force, resolved.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_body: u64,
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) max_head: usize,
    pub(crate) max_connections: usize,
    pub(crate) send_timeout: Duration,
    pub(crate) drain_bytes: u64,
    pub(crate) drain_time: Duration,
}

/// Connections the control API may use beyond `max_connections`, so health stays reachable.
pub(crate) const CONTROL_RESERVE: usize = 32;

/// How many times each Idempotency-Key was seen, for the most recent `capacity` keys: the oldest
/// key is forgotten first, so memory stays bounded however many keys a long run uses.
#[derive(Debug)]
pub(crate) struct KeyAttempts {
    counts: HashMap<String, u32>,
    order: VecDeque<String>,
    capacity: usize,
}

impl KeyAttempts {
    pub(crate) fn new(capacity: usize) -> KeyAttempts {
        KeyAttempts {
            counts: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Counts one more attempt of `key`; returns its number (1 = first).
    pub(crate) fn bump(&mut self, key: &str) -> u32 {
        if let Some(n) = self.counts.get_mut(key) {
            *n += 1;
            return *n;
        }
        if self.counts.len() >= self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.counts.remove(&old);
            }
        }
        self.counts.insert(key.to_string(), 1);
        self.order.push_back(key.to_string());
        1
    }

    pub(crate) fn clear(&mut self) {
        self.counts.clear();
        self.order.clear();
    }
}

/// The routers, built once when the server starts and shared by every connection.
pub(crate) struct Routes {
    /// The control API under `/__harness/`.
    pub(crate) control: axum::Router,
    /// The orders resource.
    pub(crate) resource: axum::Router,
}

/// Shared by every connection.
pub(crate) struct State {
    pub(crate) clock: Arc<Clock>,
    pub(crate) seq: Arc<Sequencer>,
    /// Connection ids, HTTP's and the TCP proxies' from one count.
    pub(crate) conn_ids: Arc<AtomicU64>,
    pub(crate) schedule: RwLock<(Arc<Schedule>, Arc<Vec<RuleConfig>>)>,
    /// Bumped after every schedule replacement; connections cache the schedule until it moves.
    pub(crate) schedule_gen: AtomicU64,
    pub(crate) attempts: Mutex<KeyAttempts>,
    /// Bounds on what a client may cost.
    pub(crate) limits: Limits,
    /// Bytes of request bodies that may be held at once (`limits.body_memory`), as permits.
    pub(crate) body_budget: Arc<tokio::sync::Semaphore>,
    /// What the h2 layer refused before dispatch, all connections together.
    pub(crate) http2: Arc<Http2Counts>,
    /// Connections being served.
    pub(crate) active: AtomicUsize,
    /// The control API's token, when the server listens beyond loopback.
    pub(crate) control_token: Option<String>,
    pub(crate) journal: Journal,
    pub(crate) orders: Orders,
    /// The schedule's counters in the orders' database (`state: shared`); local when `None`.
    pub(crate) shared: Option<SharedCounters>,
    pub(crate) seed: u64,
    pub(crate) hang_cap: Duration,
    pub(crate) capture: Vec<HeaderName>,
    /// Response headers copied into the journal: Retry-After, Location, Idempotent-Replayed and
    /// the config's `capture_response_headers`.
    pub(crate) response_capture: Vec<HeaderName>,
    pub(crate) empty_body_sha256: String,
    /// TLS, when the server serves `https://`.
    pub(crate) tls: Option<crate::tls::ServerTls>,
    /// This replica's name in the journal (`--replica-id`), when it is one of several.
    pub(crate) replica: Option<String>,
    /// The real dependency requests are forwarded to (proxy mode).
    pub(crate) upstream: Option<Arc<crate::upstream::Upstream>>,
    /// The gRPC services: the built-in orders and the config's `.proto` files'.
    pub(crate) grpc: crate::grpc::Services,
    /// The TCP fault proxies.
    pub(crate) tcp: Arc<crate::tcp::Proxies>,
}

impl State {
    /// Stamps a new entry with the wall clock (ms and µs) and this replica's name.
    pub(crate) fn stamp(&self, entry: &mut history::Entry) {
        let us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        entry.unix_us = us;
        entry.unix_ms = us / 1000;
        entry.replica.clone_from(&self.replica);
    }

    pub(crate) fn schedule(&self) -> Arc<Schedule> {
        self.schedule
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Installs new rules; their windows and hit counters start now.
    pub(crate) fn replace_schedule(&self, rules: Vec<RuleConfig>) {
        let s = Arc::new(Schedule::new(&rules, self.seed, Instant::now()));
        *self.schedule.write().unwrap_or_else(|p| p.into_inner()) = (s, Arc::new(rules));
        self.schedule_gen.fetch_add(1, Ordering::Release);
    }

    /// Installs new rules; with shared counters, every replica's hit counts start again too.
    pub(crate) async fn install_schedule(&self, rules: Vec<RuleConfig>) -> Result<(), StoreError> {
        if let Some(shared) = &self.shared {
            shared.clear_hits().await?;
        }
        self.replace_schedule(rules);
        Ok(())
    }

    /// Clears the journal, counters and the store; reinstalls the schedule.
    pub(crate) async fn reset(self: &Arc<Self>) -> Result<(), StoreError> {
        let epoch = self.seq.reset();
        let me = self.clone();
        let _ = tokio::task::spawn_blocking(move || me.journal.reset(epoch)).await;
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let rules = self
            .schedule
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone();
        self.replace_schedule(rules.as_ref().clone());
        self.tcp.restart_counts();
        self.http2.clear();
        if let Some(shared) = &self.shared {
            shared.clear().await?;
        }
        self.orders.clear().await
    }

    pub(crate) fn bump_attempt(&self, key: &str) -> u32 {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .bump(key)
    }

    /// Requests received in the current epoch.
    pub(crate) fn received(&self) -> u64 {
        self.seq.current().1
    }
}

/// The RFC 9113 error codes, by number, as the stats name them.
pub(crate) const ERROR_CODES: [&str; 14] = [
    "no_error",
    "protocol_error",
    "internal_error",
    "flow_control_error",
    "settings_timeout",
    "stream_closed",
    "frame_size_error",
    "refused_stream",
    "cancel",
    "compression_error",
    "connect_error",
    "enhance_your_calm",
    "inadequate_security",
    "http_1_1_required",
];

/// What the h2 layer refused on its own, before dispatch, all connections together: streams
/// reset by error code (a header block answered `431` is counted as `header_list_too_large`),
/// and connections ended with GOAWAY by error code.
#[derive(Debug, Default)]
pub(crate) struct Http2Counts {
    refused: [AtomicU64; 14],
    pub(crate) header_list_too_large: AtomicU64,
    other_refused: AtomicU64,
    goaway: [AtomicU64; 14],
    other_goaway: AtomicU64,
}

impl Http2Counts {
    pub(crate) fn refused(&self, code: u32) {
        match self.refused.get(code as usize) {
            Some(n) => n.fetch_add(1, Ordering::Relaxed),
            None => self.other_refused.fetch_add(1, Ordering::Relaxed),
        };
    }

    pub(crate) fn goaway(&self, code: u32) {
        match self.goaway.get(code as usize) {
            Some(n) => n.fetch_add(1, Ordering::Relaxed),
            None => self.other_goaway.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Streams refused before dispatch, by reason (only those with a count).
    pub(crate) fn refused_streams(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<(&'static str, u64)> = ERROR_CODES
            .iter()
            .zip(&self.refused)
            .map(|(name, n)| (*name, n.load(Ordering::Relaxed)))
            .collect();
        out.push((
            "header_list_too_large",
            self.header_list_too_large.load(Ordering::Relaxed),
        ));
        out.push(("other", self.other_refused.load(Ordering::Relaxed)));
        out.retain(|(_, n)| *n > 0);
        out
    }

    /// Connections ended with a GOAWAY that carried an error, by error code.
    pub(crate) fn connection_errors(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<(&'static str, u64)> = ERROR_CODES
            .iter()
            .zip(&self.goaway)
            .skip(1)
            .map(|(name, n)| (*name, n.load(Ordering::Relaxed)))
            .collect();
        out.push(("other", self.other_goaway.load(Ordering::Relaxed)));
        out.retain(|(_, n)| *n > 0);
        out
    }

    /// Starts every count again (`POST /__harness/reset`).
    pub(crate) fn clear(&self) {
        for n in self.refused.iter().chain(&self.goaway) {
            n.store(0, Ordering::Relaxed);
        }
        for n in [
            &self.header_list_too_large,
            &self.other_refused,
            &self.other_goaway,
        ] {
            n.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_key_is_forgotten_first() {
        let mut k = KeyAttempts::new(2);
        assert_eq!(k.bump("a"), 1);
        assert_eq!(k.bump("a"), 2);
        assert_eq!(k.bump("b"), 1);
        assert_eq!(k.bump("c"), 1, "a is forgotten to make room");
        assert_eq!(k.bump("b"), 2);
        assert_eq!(k.bump("a"), 1, "a starts again");
        assert!(k.counts.len() <= 2);
    }
}
