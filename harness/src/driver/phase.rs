//! What every executor of a phase shares: the run's keys, the context a phase runs in
//! ([`PhaseCtx`], and [`PhaseRun`] as an executor receives it), what a phase's request has that
//! is the same for every call ([`PhaseOnce`]), and what a phase produced ([`PhaseOutcome`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use primitives::draw::splitmix64;
use rand::rngs::StdRng;
use rand::SeedableRng;
use retry_policy::Limits;
use tokio_util::sync::CancellationToken;

use crate::http::Target;
use crate::metrics::{Recorder, Sink};
use crate::plan::PhasePlan;
use crate::shard::Shard;

/// A request is a late start when no worker could pick it up within this of its intended time.
pub const LATE_THRESHOLD: Duration = Duration::from_millis(1);

/// Deterministic, collision-free keys and UUIDs for a run.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    nonce: u64,
}

impl Keys {
    /// Keys every shard of a run derives alike: from `seed` and the run's common start time, so
    /// a burst round has the same key on every shard and a rerun does not replay old keys.
    pub fn shared(seed: u64, start_at_unix_ms: u64) -> Keys {
        Keys {
            nonce: splitmix64(seed ^ splitmix64(start_at_unix_ms ^ 0x5348_4152_4453)),
        }
    }

    /// Keys derived from `seed`; `unique` mixes in the clock so reruns against a long-lived service
    /// do not replay old keys.
    pub fn new(seed: u64, unique: bool) -> Keys {
        let clock = if unique {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        } else {
            0
        };
        Keys {
            nonce: splitmix64(seed ^ splitmix64(clock)),
        }
    }

    fn hex(&self, salt: u64, phase: u16, n: u64) -> String {
        let a = splitmix64(self.nonce ^ splitmix64(salt ^ (u64::from(phase) << 48) ^ n));
        let b = splitmix64(a ^ 0x5151);
        format!("{:016x}{:016x}", a, b)
    }

    /// The Idempotency-Key of operation (or burst round) `n` of a phase.
    pub fn key(&self, phase: u16, n: u64) -> String {
        let h = self.hex(1, phase, n);
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// A seed derived from the run's keys for `salt` (a deliver phase's event ids): unique per
    /// run against a live service, as the keys are.
    pub fn derive(&self, salt: u64) -> u64 {
        splitmix64(self.nonce ^ splitmix64(4 ^ salt.rotate_left(32)))
    }

    /// The `{{uuid}}` of operation `n`.
    pub fn uuid(&self, phase: u16, n: u64) -> String {
        uuid_from_hex(&self.hex(2, phase, n))
    }

    /// An RNG for worker `client` of a phase.
    pub fn rng(&self, phase: u16, client: u32) -> StdRng {
        StdRng::seed_from_u64(splitmix64(
            self.nonce ^ splitmix64(3 ^ (u64::from(phase) << 40) ^ u64::from(client)),
        ))
    }
}

/// What a phase run needs from the run around it.
#[derive(Clone)]
pub struct PhaseCtx {
    /// The phase's index in the scenario.
    pub index: u16,
    /// Where the load goes.
    pub target: Arc<Target>,
    /// The run's keys and random sources.
    pub keys: Keys,
    /// When the run started: attempts' times count from here.
    pub run_start: Instant,
    /// Cancelled on Ctrl-C or SIGTERM (and, with `hard_stop`, at the phase's end): workers start
    /// nothing more, and operations in flight are cut short and counted as cancelled.
    pub stop: CancellationToken,
    /// The phase's duration is a hard stop: what is in flight when it ends is cancelled
    /// (`harness load`). Otherwise nothing starts after the end, and what is in flight finishes
    /// under its retry policy, so the checks judge whole operations.
    pub hard_stop: bool,
    /// Operations finished, for the progress bar.
    pub done: Arc<AtomicU64>,
    /// Keep one record per attempt (scenario runs); `load` does not.
    pub keep_attempts: bool,
    /// Values captured by earlier phases (read) — this phase's captures are returned separately.
    pub captured: Arc<HashMap<String, String>>,
    /// Where this phase's captures go (set by `run_phase`).
    pub capture_sink: Option<Arc<std::sync::Mutex<HashMap<String, String>>>>,
    /// This process's part of the run (see [`crate::shard`]): its share of the workers, and
    /// global numbers for operations and clients.
    pub shard: Shard,
    /// When the phase was scheduled to start (every shard alike); bursts with `every` time their
    /// rounds from it. `None`: from when the phase starts here.
    pub scheduled: Option<Instant>,
    /// The phase's request as far as it is the same for every client (set by `run_phase`).
    pub once: Option<Arc<PhaseOnce>>,
    /// The live dashboard the phase reports to (`--dashboard`).
    pub live: Option<Arc<crate::live::Board>>,
}

/// What of a phase's request is the same for every call of every client, built once per phase
/// and shared: every worker then sends from the same memory, which stays in cache, where a copy
/// of its own per worker (hundreds of them over HTTP/2) would be read cold on every call, and
/// nothing is rendered per call.
#[derive(Debug, Default)]
pub struct PhaseOnce {
    /// A gRPC phase's request message, encoded and framed, when its JSON has no placeholder.
    pub(super) message: Option<bytes::Bytes>,
    /// The whole request, when nothing in it changes from call to call (no placeholder
    /// anywhere) and no client adds a header of its own.
    pub(super) request: Option<Arc<crate::http::Outgoing>>,
}

/// One phase as its executor runs it: the plan, the run around it, the limits its clients
/// share (retry budget, breaker, gRPC throttle) and where their measurements go.
#[derive(Clone, Copy)]
pub(super) struct PhaseRun<'a> {
    /// The phase's plan.
    pub(super) plan: &'a Arc<PhasePlan>,
    /// The run around the phase.
    pub(super) ctx: &'a PhaseCtx,
    /// What the phase's clients share under their retry policy.
    pub(super) shared: &'a Arc<Limits>,
    /// Where the workers fold their latencies, and their stop signal.
    pub(super) sink: &'a Arc<Sink>,
}

/// What a phase produced.
#[derive(Debug)]
pub struct PhaseOutcome {
    /// What the phase's clients measured.
    pub recorder: Recorder,
    /// When the phase started.
    pub started: Instant,
    /// How long it ran.
    pub duration: Duration,
    /// The shared key of each burst round, in order.
    pub round_keys: Vec<String>,
    /// Values this phase captured from its last successful response.
    pub captured: HashMap<String, String>,
    /// A deliver phase's journal and the ids the verify step asks about.
    pub delivered: Option<Delivered>,
}

/// Most event ids, forgery ids and subjects a deliver phase keeps for the verify step.
pub const VERIFY_MAX: usize = 2000;

/// What a deliver phase leaves beside its measurements.
#[derive(Debug)]
pub struct Delivered {
    /// The deliveries' journal: one JSON line per attempt, in the order the attempts ended
    /// (none when no file could be made: the phase then failed).
    pub journal: Option<tempfile::NamedTempFile>,
    /// Entries in it.
    pub entries: u64,
    /// Genuine events' ids, for the verify step (the first [`VERIFY_MAX`]).
    pub events: Vec<String>,
    /// Forged deliveries' event ids, for the verify step (the first [`VERIFY_MAX`]).
    pub forged: Vec<String>,
    /// Subjects whose events went out of order, for the state lookup (the first
    /// [`VERIFY_MAX`]).
    pub subjects: Vec<String>,
    /// The phase's figures for the report.
    pub metrics: BTreeMap<String, serde_json::Value>,
}

/// A version-4 UUID string from 32 random hex digits (version and variant digits set).
pub fn uuid_from_hex(h: &str) -> String {
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_deterministic_and_distinct() {
        let k = Keys::new(7, false);
        assert_eq!(k.key(0, 1), Keys::new(7, false).key(0, 1));
        assert_ne!(k.key(0, 1), k.key(0, 2));
        assert_ne!(k.key(0, 1), k.key(1, 1));
        assert_ne!(k.key(0, 1), Keys::new(8, false).key(0, 1));
        assert_eq!(k.key(0, 1).len(), 36);
    }
}
