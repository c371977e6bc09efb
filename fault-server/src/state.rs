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
    pub(crate) seq: Sequencer,
    pub(crate) conn_ids: AtomicU64,
    pub(crate) schedule: RwLock<(Arc<Schedule>, Arc<Vec<RuleConfig>>)>,
    /// Bumped after every schedule replacement; connections cache the schedule until it moves.
    pub(crate) schedule_gen: AtomicU64,
    pub(crate) attempts: Mutex<KeyAttempts>,
    /// Bounds on what a client may cost.
    pub(crate) limits: Limits,
    /// Bytes of request bodies that may be held at once (`limits.body_memory`), as permits.
    pub(crate) body_budget: Arc<tokio::sync::Semaphore>,
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
