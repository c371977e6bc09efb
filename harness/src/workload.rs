//! Load from a test, without the CLI: one phase — a same-key burst, a rate, a closed pool of
//! clients, a fleet — run by the very executors `harness run` uses, on the caller's runtime.
//!
//! Why the same executors: a burst's requests are released together on connections opened
//! beforehand, a rate is an open model, a fleet's clients run every operation under a retry
//! [`Policy`] through the one executor of the harness. A test that drives its load this way
//! reproduces what a scenario file would, and judges the journal with the same checks.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use harness::checks::{CheckSpec, DuplicatesConfig};
//! use harness::fault_server::{FaultServer, IdempotencyImpl, OrdersConfig};
//! use harness::workload::{Request, Workload};
//!
//! let server = FaultServer::builder()
//!     .orders(OrdersConfig::with(IdempotencyImpl::Unique))
//!     .start()
//!     .await?;
//! let run = Workload::burst(10)
//!     .request(Request::post("/orders").idempotency_key().json(serde_json::json!({ "sku": "A" })))
//!     .run(&server.url())
//!     .await?;
//! assert_eq!(run.figures.sent, 10);
//! DuplicatesConfig::default().judge(&server.journal().await).assert_passes();
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use history::{ClientAttempt, ClientFigures, Facts};
use tokio_util::sync::CancellationToken;
use yaml_config::{ConfigError, Dur};

pub use retry_policy::{Backoff, BackoffKind, Jitter, KeyMode, Policy};

use crate::driver::{self, Keys, PhaseCtx};
use crate::http::{Connect, Target, TargetError};
use crate::plan::PhaseKind;
use crate::scenario::{
    self, BurstFile, ClientsFile, FleetFile, Overrides, PhaseFile, PolicyFile, RateFile,
    ReportFile, RequestFile, ScenarioFile,
};
use crate::shard::Shard;

/// Where errors of a workload say they come from.
const ORIGIN: &str = "workload";

/// One phase of load, built in Rust: an executor, a request, a retry policy.
///
/// Bounds are those of a scenario file (at most 100,000 workers, 100 attempts, …), checked when
/// it runs; an error names the field as the scenario file would (`phases[0].burst.size`).
#[derive(Debug, Clone)]
pub struct Workload {
    executor: Executor,
    request: Request,
    policy: Policy,
    client_id_header: bool,
    seed: u64,
    connect: Connect,
    /// A setting given to an executor it does not apply to: refused when the workload runs.
    misplaced: Option<(&'static str, &'static str)>,
}

/// Which executor, as a scenario's phase says it.
#[derive(Debug, Clone)]
enum Executor {
    Burst(BurstFile),
    Rate(RateFile),
    Clients(ClientsFile),
    Fleet(FleetFile),
}

impl Workload {
    fn of(executor: Executor) -> Workload {
        Workload {
            executor,
            request: Request::get("/"),
            policy: Policy::default(),
            client_id_header: true,
            seed: 1,
            connect: Connect::default(),
            misplaced: None,
        }
    }

    /// `size` operations released together, on connections opened beforehand, sharing one
    /// Idempotency-Key (`{{key}}`) per round: real concurrency on one key. One round; see
    /// [`Workload::rounds`].
    pub fn burst(size: u32) -> Workload {
        Workload::of(Executor::Burst(BurstFile {
            size,
            rounds: 1,
            pause: None,
            every: None,
            sync: None,
        }))
    }

    /// An open model: operations due at `rps` per second for `duration`, whatever happened
    /// before, on at most 64 connections (see [`Workload::connections`]).
    pub fn rate(rps: f64, duration: Duration) -> Workload {
        Workload::of(Executor::Rate(RateFile {
            rps: Some(rps),
            duration: Some(Dur(duration)),
            stages: None,
            connections: None,
        }))
    }

    /// A closed model: `concurrency` clients, each sending its next operation when the last
    /// ended, `requests` operations in all.
    pub fn clients(concurrency: u32, requests: u64) -> Workload {
        Workload::of(Executor::Clients(ClientsFile {
            concurrency,
            duration: None,
            requests: Some(requests),
            think: None,
        }))
    }

    /// `clients` clients that start together, each running one operation (see
    /// [`Workload::operations`]) under the retry policy: the thundering herd.
    pub fn fleet(clients: u32) -> Workload {
        Workload::of(Executor::Fleet(FleetFile {
            clients,
            operations: 1,
        }))
    }

    /// The request every operation sends (default `GET /`).
    pub fn request(mut self, request: Request) -> Self {
        self.request = request;
        self
    }

    /// The retry policy every operation runs under (default: one attempt, no retry).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Seeds the clients' jitter and the keys' derivation (keys are unique per run whatever the
    /// seed, so two runs against one server never share a key).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Send `x-client-id: p0-c<N>` so the journal can group a client's attempts (default on:
    /// the checks group retries without an Idempotency-Key by it).
    pub fn client_id_header(mut self, on: bool) -> Self {
        self.client_id_header = on;
        self
    }

    /// Trust this certificate (PEM) for an `https://` target, such as a fault server's
    /// self-signed one.
    pub fn trust_pem(mut self, pem: impl Into<String>) -> Self {
        self.connect.tls.trusted_pem.push(pem.into());
        self
    }

    /// Rounds of a burst (each with its own key), and the pause after each. A burst's setting
    /// only: given to another executor, the workload is refused when it runs.
    pub fn rounds(mut self, rounds: u32, pause: Duration) -> Self {
        match &mut self.executor {
            Executor::Burst(b) => {
                b.rounds = rounds;
                b.pause = Some(Dur(pause));
            }
            _ => self.misplaced = Some(("rounds", "burst")),
        }
        self
    }

    /// Connections (workers) of a rate; a request that finds none free starts late. A rate's
    /// setting only.
    pub fn connections(mut self, connections: u32) -> Self {
        match &mut self.executor {
            Executor::Rate(r) => r.connections = Some(connections),
            _ => self.misplaced = Some(("connections", "rate")),
        }
        self
    }

    /// Operations each client of a fleet runs, one after another. A fleet's setting only.
    pub fn operations(mut self, operations: u64) -> Self {
        match &mut self.executor {
            Executor::Fleet(f) => f.operations = operations,
            _ => self.misplaced = Some(("operations", "fleet")),
        }
        self
    }

    /// Runs the phase against `base_url` (`http://HOST:PORT`) to its end, on the caller's
    /// runtime, and returns what the clients measured. Fails before sending anything when a
    /// bound is broken or the target does not accept connections.
    pub async fn run(self, base_url: &str) -> Result<WorkloadRun, WorkloadError> {
        if let Some((setting, executor)) = self.misplaced {
            return Err(ConfigError::at(
                ORIGIN,
                setting,
                format!("`{setting}` is a setting of a {executor}, not of this workload"),
            )
            .into());
        }
        validate_policy(&self.policy)?;
        let (burst, rate, clients, fleet) = match self.executor.clone() {
            Executor::Burst(b) => (Some(b), None, None, None),
            Executor::Rate(r) => (None, Some(r), None, None),
            Executor::Clients(c) => (None, None, Some(c), None),
            Executor::Fleet(f) => (None, None, None, Some(f)),
        };
        let file = ScenarioFile {
            name: Some(ORIGIN.into()),
            description: None,
            seed: Some(self.seed),
            time_scale: None,
            server: None,
            server_config: None,
            target: Some(base_url.to_string()),
            relay: None,
            client: PolicyFile {
                client_id_header: Some(self.client_id_header),
                ..PolicyFile::default()
            },
            phases: vec![PhaseFile {
                name: ORIGIN.into(),
                burst,
                rate,
                clients,
                fleet,
                deliver: None,
                request: self.request.file,
                client: None,
                capture: BTreeMap::new(),
            }],
            checks: checks::ChecksConfig::none(),
            report: ReportFile::default(),
            tls: None,
            http: None,
            grpc: None,
        };
        let mut plan = scenario::resolve(file, Path::new(ORIGIN), &Overrides::default())?;
        let mut phase = plan.phases.remove(0);
        phase.policy = self.policy;
        let target = Arc::new(Target::with(base_url, &self.connect)?);
        crate::reach::ensure_reachable(&target)
            .await
            .map_err(|e| WorkloadError::Unreachable(e.to_string()))?;
        let run_start = Instant::now();
        let kind = phase.kind.clone();
        let ctx = PhaseCtx {
            index: 0,
            target,
            keys: Keys::new(self.seed, true),
            run_start,
            stop: CancellationToken::new(),
            hard_stop: false,
            done: Arc::new(AtomicU64::new(0)),
            keep_attempts: true,
            captured: Arc::new(HashMap::new()),
            capture_sink: None,
            shard: Shard::WHOLE,
            scheduled: None,
            once: None,
            live: None,
        };
        let mut out = driver::run_phase(Arc::new(phase), ctx).await;
        if let Some(e) = crate::reach::RunError::worker_died("workload", &out.recorder) {
            return Err(WorkloadError::WorkerDied(e));
        }
        let rec = &mut out.recorder;
        let attempts = rec.attempts.take().unwrap_or_default();
        Ok(WorkloadRun {
            figures: ClientFigures {
                operations: rec.operations.saturating_sub(rec.cancelled),
                failed_operations: rec.failed_operations,
                sent: rec.sent,
                completed: rec.completed(),
                failed_attempts: rec.requests().request_failures(),
                transport_errors: rec.error_count(),
                latency: rec.latency.clone(),
                duration: out.duration,
            },
            statuses: rec.by_status(),
            retries: rec.retries,
            errors: rec.errors_by_kind(),
            attempts,
            keys: match kind {
                PhaseKind::Burst { .. } => out.round_keys,
                _ => Vec::new(),
            },
        })
    }
}

/// What a [`Workload`] measured from the clients' side; the server's side is its journal.
#[derive(Debug, Clone)]
pub struct WorkloadRun {
    /// Operations, failures, attempts sent and answered, latency, duration: what the checks
    /// read as the driver's figures ([`WorkloadRun::facts`]).
    pub figures: ClientFigures,
    /// Responses by status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Attempts beyond the first of their operation.
    pub retries: u64,
    /// Attempts without a usable response, by kind (`timeout`, `reset`, `closed`, …).
    pub errors: BTreeMap<String, u64>,
    /// Every attempt as the client saw it: operation, attempt number, start and end, status
    /// or error.
    pub attempts: Vec<ClientAttempt>,
    /// A burst's Idempotency-Key of each round, in order.
    pub keys: Vec<String>,
}

impl WorkloadRun {
    /// The facts the checks read beside the journal: these figures (the `thresholds` check
    /// judges throughput and error rates on them).
    ///
    /// Evidence times count from the server's start (`time_origin_us` 0), not from the
    /// workload's: a workload is aimed at a URL and cannot read the clock of the server behind
    /// it, on which the journal's times are written. For a fault server started for the test,
    /// as in every example, the two starts are a connection apart; a test that runs several
    /// workloads against one server gets every one's evidence on that server's one time line.
    pub fn facts(&self) -> Facts {
        Facts {
            client: Some(self.figures.clone()),
            time_origin_us: 0,
            ..Facts::default()
        }
    }

    /// Responses with this status.
    pub fn status_count(&self, status: u16) -> u64 {
        self.statuses.get(&status).copied().unwrap_or(0)
    }
}

/// The request each operation sends, as a scenario's `request:` says it; placeholders in the
/// path, headers and body are filled per operation: `{{key}}` (the operation's Idempotency-Key,
/// shared by a burst round), `{{uuid}}`, `{{seq}}`, `{{client}}`, `{{round}}`.
#[derive(Debug, Clone)]
pub struct Request {
    file: RequestFile,
}

impl Request {
    /// A request with this method and path (which starts with `/`).
    pub fn new(method: &str, path: &str) -> Request {
        Request {
            file: RequestFile {
                method: Some(method.to_string()),
                path: path.to_string(),
                headers: BTreeMap::new(),
                json: None,
                body: None,
                grpc: None,
                message: None,
                metadata: BTreeMap::new(),
            },
        }
    }

    /// `GET path`.
    pub fn get(path: &str) -> Request {
        Request::new("GET", path)
    }

    /// `POST path`.
    pub fn post(path: &str) -> Request {
        Request::new("POST", path)
    }

    /// A header (the value may hold placeholders).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.file
            .headers
            .insert(name.to_string(), value.to_string());
        self
    }

    /// `Idempotency-Key: {{key}}`: one key per operation (per round in a burst), kept across
    /// its retries unless the policy says [`KeyMode::PerAttempt`].
    pub fn idempotency_key(self) -> Self {
        self.header("Idempotency-Key", "{{key}}")
    }

    /// A JSON body (strings may hold placeholders), sent with `content-type: application/json`.
    pub fn json(mut self, body: serde_json::Value) -> Self {
        self.file.json = Some(body);
        self
    }

    /// A raw body.
    pub fn body(mut self, body: &str) -> Self {
        self.file.body = Some(body.to_string());
        self
    }
}

/// A workload could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A value is out of its bounds (the message names the field and the bound).
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The URL is not `http(s)://HOST[:PORT]`, or its TLS settings are unusable.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The target did not accept a connection (or a TLS handshake).
    #[error("{0}")]
    Unreachable(String),
    /// A worker died (a panic): what it measured is lost.
    #[error(transparent)]
    WorkerDied(crate::reach::RunError),
}

/// The policy's bounds, as a scenario's `client:` is held to them.
fn validate_policy(p: &Policy) -> Result<(), ConfigError> {
    let bad = |field: &str, message: String| {
        Err(ConfigError::at(ORIGIN, format!("policy.{field}"), message))
    };
    let max = scenario::bounds::ATTEMPTS;
    if p.max_attempts == 0 || p.max_attempts > max {
        return bad(
            "max_attempts",
            format!("{}; give 1 (no retries) to {max}", p.max_attempts),
        );
    }
    if p.timeout.is_zero() || p.total_timeout.is_some_and(|t| t.is_zero()) {
        return bad(
            "timeout",
            "an attempt and an operation need more than 0 to get an answer".into(),
        );
    }
    if !(p.backoff.factor.is_finite() && p.backoff.factor >= 1.0) {
        return bad("backoff.factor", "must be a number ≥ 1".into());
    }
    if p.deadline_header && p.total_timeout.is_none() {
        return bad(
            "deadline_header",
            "needs `total_timeout` (the deadline it carries)".into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fault_server::FaultServer;

    #[tokio::test]
    async fn evidence_times_are_the_servers_journal_times() {
        let before_server = Instant::now();
        let server = FaultServer::builder()
            .start()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let run = Workload::clients(1, 2)
            .run(&server.url())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let journal = server.wait_for(2).await.unwrap_or_else(|e| panic!("{e}"));
        let facts = run.facts();
        assert_eq!(facts.time_origin_us, 0);
        let at_most_ms = before_server.elapsed().as_secs_f64() * 1000.0;
        for e in &journal {
            let at = facts.run_ms(e.t_recv_us);
            assert_eq!(at, e.t_recv_us as f64 / 1000.0);
            // Sent after the 50 ms pause: on the server's time line, not the workload's.
            assert!((50.0..=at_most_ms).contains(&at), "{at} ms");
        }
    }
}
