//! The plan: a scenario resolved into what the rest of the harness trusts — every duration
//! already multiplied by the time scale, every template compiled, every phase known to end, every
//! check configured and bounded. The YAML as written is [`crate::scenario`]'s business; nothing
//! downstream of the plan re-parses or re-checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use checks::ChecksConfig;
use retry_policy::grpc::{GrpcPolicy, ThrottleSpec};
use retry_policy::Policy;

use crate::http::Connect;
use crate::template::RequestTemplate;

/// How a burst's requests are made to arrive together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
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
    /// Name in reports.
    pub name: String,
    /// What the scenario demonstrates.
    pub description: Option<String>,
    /// The scenario file.
    pub source: PathBuf,
    /// The seed of every random choice.
    pub seed: u64,
    /// What every duration was multiplied by.
    pub time_scale: f64,
    /// The embedded fault server's config, durations already scaled.
    pub server: Option<fault_server::Config>,
    /// Where the load goes instead of the embedded server.
    pub target: Option<String>,
    /// Relay tiers between the load and the embedded server, top first.
    pub relay: Vec<TierSpec>,
    /// The load phases, in order.
    pub phases: Vec<PhasePlan>,
    /// The checks and their thresholds, scaled.
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
    /// Its name in reports.
    pub name: String,
    /// Its executor.
    pub kind: PhaseKind,
    /// The request each operation sends.
    pub template: RequestTemplate,
    /// The retry policy each operation runs under.
    pub policy: Policy,
    /// Send `x-client-id: p<phase>-c<client>`.
    pub client_id_header: bool,
    /// (variable, JSON field path) captured from the last successful response.
    pub capture: Vec<(String, String)>,
    /// A gRPC call instead of an HTTP request: the template is then the call's path, metadata
    /// and message (JSON), and this its method and gRFC A6 policy.
    pub grpc: Option<Arc<GrpcPlan>>,
}

/// A phase's gRPC call: the method its message is encoded for, and the client's A6 policy.
#[derive(Debug, Clone)]
pub struct GrpcPlan {
    /// The method (its path and message types).
    pub method: grpc::Method,
    /// Retry, hedging or neither, played correctly or broken as `conduct` says.
    pub policy: GrpcPolicy,
    /// `retryThrottling`: the tokens the phase's clients share.
    pub throttle: Option<ThrottleSpec>,
    /// The call's deadline, across all its attempts (sent as `grpc-timeout`).
    pub deadline: Option<Duration>,
}

/// What drives a phase.
#[derive(Debug, Clone, PartialEq)]
pub enum PhaseKind {
    /// N operations released together, R rounds, one key per round.
    Burst {
        /// Operations per round.
        size: u32,
        /// Rounds.
        rounds: u32,
        /// Pause after each round.
        pause: Duration,
        /// Rounds on the clock: round `k` at the phase's scheduled start + (k − 1) × every
        /// (instead of `pause` after the last round ended): what keeps the shards of a run
        /// firing each round together.
        every: Option<Duration>,
        /// How a round's requests are made to arrive together.
        sync: SyncMode,
    },
    /// Stages of (start rps, end rps, duration); constant rate is one flat stage.
    Rate {
        /// Stages of (start rps, end rps, duration).
        stages: Vec<(f64, f64, Duration)>,
        /// Connections (workers) available.
        connections: u32,
    },
    /// Closed model: each client sends its next request when the last ended.
    Clients {
        /// Clients.
        concurrency: u32,
        /// How long, when bounded by time.
        duration: Option<Duration>,
        /// Operations in all, when bounded by count.
        requests: Option<u64>,
        /// Pause between a client's operations.
        think: Duration,
    },
    /// Clients that start together, each running operations under the retry policy.
    Fleet {
        /// Clients.
        clients: u32,
        /// Operations per client.
        operations: u64,
    },
    /// A webhook provider delivering at least once to the consumer at the target (see
    /// [`crate::driver`]).
    Deliver(Box<DeliverPlan>),
}

/// What a `deliver` phase runs with: the checked delivery plan (its durations scaled), the
/// workers, and how a duplicate's copies are released together.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliverPlan {
    /// Style, secret, events, chaos, redelivery (its timeout and waits scaled) and tolerance;
    /// `seed` is the scenario's (the chaos's), the ids' seed is the run's.
    pub spec: webhooks::PlanSpec,
    /// Workers, each delivering one subject at a time.
    pub concurrency: u32,
    /// How a duplicate's copies sent together are released.
    pub sync: SyncMode,
}

impl PhaseKind {
    /// The executor's name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            PhaseKind::Burst { .. } => "burst",
            PhaseKind::Rate { .. } => "rate",
            PhaseKind::Clients { .. } => "clients",
            PhaseKind::Fleet { .. } => "fleet",
            PhaseKind::Deliver(_) => "deliver",
        }
    }

    /// How long a phase runs by its own definition, when it has a duration: a fact of the plan
    /// that the scenario (a sharded run's schedule) and the driver (a hard stop) both read.
    pub fn length(&self) -> Option<Duration> {
        match self {
            PhaseKind::Rate { stages, .. } => Some(stages.iter().map(|s| s.2).sum()),
            PhaseKind::Clients { duration, .. } => *duration,
            // Rounds on the clock: the last goes at (rounds − 1) × every, and one more `every` is
            // its time to finish.
            PhaseKind::Burst {
                every: Some(every),
                rounds,
                ..
            } => Some(every.saturating_mul(*rounds)),
            PhaseKind::Burst { .. } | PhaseKind::Fleet { .. } | PhaseKind::Deliver(_) => None,
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
