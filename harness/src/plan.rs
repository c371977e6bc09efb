//! The plan: a scenario resolved into what the rest of the harness trusts — every duration
//! already multiplied by the time scale, every template compiled, every phase known to end, every
//! check configured and bounded. The YAML as written is [`crate::scenario`]'s business; nothing
//! downstream of the plan re-parses or re-checks.

use std::path::PathBuf;
use std::time::Duration;

use checks::ChecksConfig;
use retry_policy::Policy;

use crate::http::Connect;
use crate::template::RequestTemplate;

/// How a burst's requests are made to arrive together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// Every connection is open and every request serialized; then all are written at once.
    #[default]
    Release,
    /// HTTP/1.1: each connection sends all of its request but the last byte, then the last
    /// bytes go out together: each request completes with one byte.
    LastByte,
    /// HTTP/2: every request goes out on one connection but its last frame, then every last
    /// frame in one write: the server reads the whole round at once.
    SinglePacket,
}

impl SyncMode {
    /// The name used in scenario files and reports.
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Release => "release",
            SyncMode::LastByte => "last-byte",
            SyncMode::SinglePacket => "single-packet",
        }
    }
}

/// A scenario resolved: what the driver runs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub description: Option<String>,
    pub source: PathBuf,
    pub seed: u64,
    pub time_scale: f64,
    /// The embedded fault server's config, durations already scaled.
    pub server: Option<fault_server::Config>,
    pub target: Option<String>,
    /// Relay tiers between the load and the embedded server, top first.
    pub relay: Vec<TierSpec>,
    pub phases: Vec<PhasePlan>,
    pub checks: ChecksConfig,
    /// Timeline window (real time).
    pub window: Option<Duration>,
    /// How the target is reached: TLS settings, HTTP/2.
    pub connect: Connect,
    /// This process's part of the run (`--shard`, or an Indexed Job's environment).
    pub shard: crate::shard::Shard,
    /// The run's common start (`--start-at`), unix ms: every phase is scheduled from it.
    pub start_at_unix_ms: Option<u64>,
}

/// One resolved phase.
#[derive(Debug, Clone)]
pub struct PhasePlan {
    pub name: String,
    pub kind: PhaseKind,
    pub template: RequestTemplate,
    pub policy: Policy,
    pub client_id_header: bool,
    /// (variable, JSON field path) captured from the last successful response.
    pub capture: Vec<(String, String)>,
}

/// What drives a phase.
#[derive(Debug, Clone, PartialEq)]
pub enum PhaseKind {
    Burst {
        size: u32,
        rounds: u32,
        pause: Duration,
        /// Rounds on the clock: round `k` at the phase's scheduled start + (k − 1) × every
        /// (instead of `pause` after the last round ended): what keeps the shards of a run
        /// firing each round together.
        every: Option<Duration>,
        sync: SyncMode,
    },
    /// Stages of (start rps, end rps, duration); constant rate is one flat stage.
    Rate {
        stages: Vec<(f64, f64, Duration)>,
        connections: u32,
    },
    Clients {
        concurrency: u32,
        duration: Option<Duration>,
        requests: Option<u64>,
        think: Duration,
    },
    Fleet {
        clients: u32,
        operations: u64,
    },
}

impl PhaseKind {
    /// The executor's name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            PhaseKind::Burst { .. } => "burst",
            PhaseKind::Rate { .. } => "rate",
            PhaseKind::Clients { .. } => "clients",
            PhaseKind::Fleet { .. } => "fleet",
        }
    }
}

/// The header a tier adds to every downstream request, carrying its name.
pub const RELAY_TIER_HEADER: &str = "x-relay-tier";

/// One tier of a chain: its name (in stats and [`RELAY_TIER_HEADER`]) and its client policy.
#[derive(Debug, Clone)]
pub struct TierSpec {
    /// Name of the tier.
    pub name: String,
    /// How the tier calls the next one down.
    pub policy: Policy,
}
