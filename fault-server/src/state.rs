//! What every connection of a running fault server shares: the clock, the arrival counter, the
//! schedule in force, the attempt count per Idempotency-Key, the journal and the orders store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http::HeaderName;

use crate::config::RuleConfig;
use crate::journal::{Clock, Journal, Sequencer};
use crate::orders::{Orders, StoreError};
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
    pub(crate) attempts: Mutex<HashMap<String, u32>>,
    pub(crate) journal: Journal,
    pub(crate) orders: Orders,
    pub(crate) seed: u64,
    pub(crate) hang_cap: Duration,
    pub(crate) capture: Vec<HeaderName>,
    pub(crate) empty_body_sha256: String,
    /// TLS, when the server serves `https://`.
    pub(crate) tls: Option<crate::tls::ServerTls>,
}

impl State {
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
        self.orders.clear().await
    }

    pub(crate) fn bump_attempt(&self, key: &str) -> u32 {
        let mut m = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(key) {
            *n += 1;
            *n
        } else {
            m.insert(key.to_string(), 1);
            1
        }
    }

    /// Requests received in the current epoch.
    pub(crate) fn received(&self) -> u64 {
        self.seq.current().1
    }
}
